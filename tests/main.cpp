// Catch2 main of the softneuro test suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
