// A plugin for another ABI version whose routine registers itself from a static
// initialiser: it must not reach the registry (the ABI check comes first).
#include "relu_routine.hpp"

#include <softneuro/plugin.hpp>

#include <cstdlib>

namespace {
constexpr char kName[] = "static_bad_abi";
}
SOFTNEURO_REGISTER_ROUTINE(TestRelu<kName>);

extern "C" __attribute__((visibility("default"))) uint32_t softneuro_plugin_abi() {
  return softneuro::abi_version + 1;
}
extern "C" __attribute__((visibility("default"))) void softneuro_plugin_init(softneuro::PluginRegistrar*) {
  std::abort();  // reaching this means the ABI check failed to refuse the plugin
}
