#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace softneuro::core {
namespace {
LogLevel threshold() {
  static const LogLevel level = [] {
    const char* env = std::getenv("SOFTNEURO_LOG");
    if (!env) return LogLevel::warn;
    if (!std::strcmp(env, "error")) return LogLevel::error;
    if (!std::strcmp(env, "info")) return LogLevel::info;
    if (!std::strcmp(env, "debug")) return LogLevel::debug;
    return LogLevel::warn;
  }();
  return level;
}
constexpr const char* kNames[] = {"error", "warning", "info", "debug"};
}  // namespace

bool log_enabled(LogLevel level) { return level <= threshold(); }

void log_line(LogLevel level, const std::string& line) {
  std::fprintf(stderr, "softneuro: %s: %s\n", kNames[static_cast<int>(level)], line.c_str());
}

}  // namespace softneuro::core
