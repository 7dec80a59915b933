// softneuro/softneuro.hpp — everything an app needs: load a .dnn, run it.
// Nothing of the routine-author API (softneuro/routine.hpp, plugin.hpp).
#pragma once

#include <softneuro/blob.hpp>
#include <softneuro/error.hpp>
#include <softneuro/session.hpp>
#include <softneuro/npy.hpp>
