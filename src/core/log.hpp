// The one logging path: fmt to stderr, filtered by SOFTNEURO_LOG (error|warn|info|debug; default warn).
#pragma once

#include <fmt/format.h>

namespace softneuro::core {

enum class LogLevel { error = 0, warn, info, debug };
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& line);

template <class... A>
void log(LogLevel level, fmt::format_string<A...> f, A&&... args) {
  if (log_enabled(level)) log_line(level, fmt::format(f, std::forward<A>(args)...));
}
template <class... A> void warn(fmt::format_string<A...> f, A&&... a) { log(LogLevel::warn, f, std::forward<A>(a)...); }
template <class... A> void info(fmt::format_string<A...> f, A&&... a) { log(LogLevel::info, f, std::forward<A>(a)...); }
template <class... A> void debug(fmt::format_string<A...> f, A&&... a) { log(LogLevel::debug, f, std::forward<A>(a)...); }

}  // namespace softneuro::core
