// A plugin whose initialisation throws something that is not a std::exception.
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

namespace {
constexpr char kName[] = "plugin_throws_int";
void add_routines(softneuro::PluginRegistrar& r) {
  r.add(std::make_unique<TestRelu<kName>>());
  throw 42;
}
}  // namespace
SOFTNEURO_PLUGIN(add_routines)
