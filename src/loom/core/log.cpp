#include "loom/core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "loom/core/error.h"
#include "loom/core/settings.h"

namespace loom {
namespace {

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

void stderr_sink(LogLevel level, std::string_view subsystem, std::string_view message) {
  std::fprintf(stderr, "[loom:%.*s] %s: %.*s\n", static_cast<int>(subsystem.size()),
               subsystem.data(), level_name(level), static_cast<int>(message.size()),
               message.data());
}

// The CLI validates LOOM_LOG_LEVEL up front (exit 2 when it is wrong); a library user with a bad
// value gets the default rather than an exception from the first log line.
int initial_level() {
  try {
    return static_cast<int>(parse_log_level(setting("LOOM_LOG_LEVEL")));
  } catch (const Error&) {
    return static_cast<int>(LogLevel::kInfo);
  }
}

struct LogState {
  std::mutex mutex;
  LogSink sink = stderr_sink;
  std::atomic<int> level{initial_level()};
};

LogState& state() {
  static LogState s;
  return s;
}

}  // namespace

LogLevel parse_log_level(std::string_view text) {
  for (LogLevel l :
       {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError, LogLevel::kOff}) {
    if (text == level_name(l)) return l;
  }
  throw ConfigError("log level must be debug, info, warn, error or off, got '" + std::string(text) +
                    "'");
}

void set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().sink = sink ? std::move(sink) : LogSink(stderr_sink);
}

void set_log_level(LogLevel level) { state().level = static_cast<int>(level); }

bool log_enabled(LogLevel level) { return static_cast<int>(level) >= state().level.load(); }

void log_message(LogLevel level, std::string_view subsystem, std::string_view message) {
  if (!log_enabled(level)) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  state().sink(level, subsystem, message);
}

}  // namespace loom
