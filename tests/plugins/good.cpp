// A well-formed test plugin: one relu routine, "cpu/plugin_relu".
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

namespace {

constexpr char kName[] = "plugin_relu";
void add_routines(softneuro::PluginRegistrar& r) { r.add(std::make_unique<TestRelu<kName>>()); }

}  // namespace

SOFTNEURO_PLUGIN(add_routines)
