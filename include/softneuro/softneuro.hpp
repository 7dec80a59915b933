// softneuro/softneuro.hpp — everything an app needs: load a .dnn, run it.
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>
#include <softneuro/session.hpp>
#include <softneuro/npy.hpp>
#include <softneuro/plugin.hpp>
