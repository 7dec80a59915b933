#include <softneuro/plugin.hpp>
#include <softneuro/session.hpp>

#include "core/registry.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

#include <filesystem>
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

  // A path (not a name for the loader's search) must be a regular file: on a FIFO dlopen blocks for ever.
  if (path.find('/') != std::string::npos) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
      throw Error("cannot load plugin: not a regular file", path);
  }
  // Routines the library's static initialisers register wait here until its ABI version is known.
  std::vector<std::unique_ptr<Routine>> static_routines;
  core::RoutineRegistry::capture_static_registrations(&static_routines);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  core::RoutineRegistry::capture_static_registrations(nullptr);
  // (Their code is the library's: destroyed before it is closed.)
  auto refuse = [&](Error e) {
    static_routines.clear();
    ::dlclose(handle);
    throw e;
  };
  if (!handle) {
    const char* err = ::dlerror();
    throw Error(fmt::format("cannot load plugin: {}", err ? err : "unknown error"), path);
  }
  using AbiFn = uint32_t (*)();
  using InitFn = void (*)(PluginRegistrar*);
  auto abi = reinterpret_cast<AbiFn>(::dlsym(handle, "softneuro_plugin_abi"));
  auto init = reinterpret_cast<InitFn>(::dlsym(handle, "softneuro_plugin_init"));
  if (!abi || !init)
    refuse(Error("not a softneuro plugin: softneuro_plugin_abi/softneuro_plugin_init are missing (use SOFTNEURO_PLUGIN)", path));
  uint32_t v = abi();
  if (v != abi_version)
    refuse(Error(fmt::format("plugin was built for routine ABI version {}, this library has version {}: rebuild it "
                             "against this libsoftneuro",
                             v, abi_version),
                 path, {}, "abi"));
  CollectingRegistrar collected;
  collected.routines = std::move(static_routines);
  try {
    init(&collected);
  } catch (const std::exception& e) {
    collected.routines.clear();
    throw Error(fmt::format("plugin initialisation failed: {}", e.what()), path);
  } catch (...) {
    collected.routines.clear();
    throw Error("plugin initialisation failed: it threw something that is not a std::exception", path);
  }
  // All of its routines or none. The handle stays open for the life of the
  // process once they are registered: their code lives in it.
  try {
    core::RoutineRegistry::instance().add_all(std::move(collected.routines), path);
  } catch (const Error&) {
    ::dlclose(handle);  // its routines are gone with the refusal
    throw;
  }
  loaded.insert(path);
}

}  // namespace softneuro
