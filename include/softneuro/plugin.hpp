// softneuro/plugin.hpp — routines from shared libraries loaded at run time.
//
// A plugin is a shared library that defines its routines with the API of
// <softneuro/routine.hpp> and exports them with SOFTNEURO_PLUGIN:
//
//   static void add_routines(softneuro::PluginRegistrar& r) {
//     r.add(std::make_unique<MyConvRoutine>());
//   }
//   SOFTNEURO_PLUGIN(add_routines)
//
// An app loads one with load_plugin() (softneuro/session.hpp), which checks the
// ABI version the plugin was compiled against before calling it, so a plugin
// built for another libsoftneuro is refused, not run.
#pragma once

#include <softneuro/routine.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace softneuro {

/// Receives the routines a plugin adds.
class PluginRegistrar {
 public:
  virtual ~PluginRegistrar() = default;
  virtual void add(std::unique_ptr<Routine> routine) = 0;
};

}  // namespace softneuro

/// Exports `fn` (void fn(softneuro::PluginRegistrar&)) as this plugin's entry point.
#define SOFTNEURO_PLUGIN(fn)                                                         \
  extern "C" __attribute__((visibility("default"))) uint32_t softneuro_plugin_abi() { \
    return ::softneuro::abi_version;                                                 \
  }                                                                                  \
  extern "C" __attribute__((visibility("default"))) void softneuro_plugin_init(      \
      ::softneuro::PluginRegistrar* registrar) {                                     \
    fn(*registrar);                                                                  \
  }
