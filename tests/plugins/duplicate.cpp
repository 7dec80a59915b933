// A plugin whose second routine takes a descriptor already registered
// (cpu/ref for relu): none of its routines may be registered.
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

namespace {
constexpr char kFirst[] = "plugin_dup_first";
constexpr char kRef[] = "ref";
void add_routines(softneuro::PluginRegistrar& r) {
  r.add(std::make_unique<TestRelu<kFirst>>());
  r.add(std::make_unique<TestRelu<kRef>>());
}
}  // namespace
SOFTNEURO_PLUGIN(add_routines)
