// Logging tagged by subsystem ("[loom:train] ..."). Messages go to a sink; the default sink
// writes to stderr so that library code never touches stdout, which belongs to the CLI.
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <string_view>

namespace loom {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

using LogSink = std::function<void(LogLevel, std::string_view subsystem, std::string_view message)>;

// Parses "debug" | "info" | "warn" | "error" | "off"; throws ConfigError otherwise.
LogLevel parse_log_level(std::string_view text);

// The process has one log destination, like it has one stderr: this is the only process-wide
// mutable state in Loom, and it is thread-safe. The level starts from LOOM_LOG_LEVEL.
void set_log_sink(LogSink sink);
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_message(LogLevel level, std::string_view subsystem, std::string_view message);

// Stream-style helper: LOOM_LOG(kInfo, "data") << "read " << n << " images";
class LogLine {
 public:
  LogLine(LogLevel level, std::string_view subsystem) : level_(level), subsystem_(subsystem) {}
  ~LogLine() { log_message(level_, subsystem_, stream_.str()); }
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::string_view subsystem_;
  std::ostringstream stream_;
};

}  // namespace loom

#define LOOM_LOG(level, subsystem)                   \
  if (!::loom::log_enabled(::loom::LogLevel::level)) \
    ;                                                \
  else                                               \
    ::loom::LogLine(::loom::LogLevel::level, subsystem)
