#include <softneuro/plugin.hpp>

#include "core/registry.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

#include <mutex>
#include <set>
#include <vector>

namespace softneuro {
namespace {

// Collects a plugin's routines so that a plugin failing half-way registers none.
struct CollectingRegistrar final : PluginRegistrar {
  std::vector<std::unique_ptr<Routine>> routines;
  void add(std::unique_ptr<Routine> r) override {
    if (r) routines.push_back(std::move(r));
  }
};

}  // namespace

void load_plugin(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> loaded;
  std::lock_guard lock(mutex);
  if (loaded.count(path)) return;

  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();
    throw Error(fmt::format("cannot load plugin: {}", err ? err : "unknown error"), path);
  }
  using AbiFn = uint32_t (*)();
  using InitFn = void (*)(PluginRegistrar*);
  auto abi = reinterpret_cast<AbiFn>(::dlsym(handle, "softneuro_plugin_abi"));
  auto init = reinterpret_cast<InitFn>(::dlsym(handle, "softneuro_plugin_init"));
  if (!abi || !init) {
    ::dlclose(handle);
    throw Error("not a softneuro plugin: softneuro_plugin_abi/softneuro_plugin_init are missing (use SOFTNEURO_PLUGIN)", path);
  }
  uint32_t v = abi();
  if (v != abi_version) {
    ::dlclose(handle);
    throw Error(fmt::format("plugin was built for routine ABI version {}, this library has version {}: rebuild it "
                            "against this libsoftneuro",
                            v, abi_version),
                path, {}, "abi");
  }
  CollectingRegistrar collected;
  try {
    init(&collected);
  } catch (const std::exception& e) {
    throw Error(fmt::format("plugin initialisation failed: {}", e.what()), path);
  }
  // The handle stays open for the life of the process: its routines live in it.
  auto& registry = core::RoutineRegistry::instance();
  for (auto& r : collected.routines) registry.add(std::move(r), path);
  loaded.insert(path);
}

}  // namespace softneuro
