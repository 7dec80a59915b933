// A plugin whose routine registers itself from a static initialiser: registered
// once the ABI check has passed, with the plugin named as its origin.
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

namespace {
constexpr char kName[] = "static_relu";
void add_nothing(softneuro::PluginRegistrar&) {}
}  // namespace
SOFTNEURO_REGISTER_ROUTINE(TestRelu<kName>);
SOFTNEURO_PLUGIN(add_nothing)
