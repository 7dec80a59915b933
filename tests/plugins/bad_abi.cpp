// A plugin that claims another routine ABI version: it must be refused before its init runs.
#include <softneuro/plugin.hpp>

#include <cstdlib>

extern "C" __attribute__((visibility("default"))) uint32_t softneuro_plugin_abi() {
  return softneuro::abi_version + 1;
}
extern "C" __attribute__((visibility("default"))) void softneuro_plugin_init(softneuro::PluginRegistrar*) {
  std::abort();  // reaching this means the ABI check failed to refuse the plugin
}
