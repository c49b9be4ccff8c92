// Loom's error types. Library code raises; only cli/ turns errors into exit codes
// (ConfigError -> 2, everything else -> 1).
//
// Besides its message an error carries fields, facts a program can read without parsing English:
// a configuration error's key ("optimizer.name"), a data error's file, the value found and the
// bound it broke. `loom` writes them to LOOM_ERROR_FILE when that is set (cli/error_report.h),
// and tests assert on them.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace loom {

// Field name -> value, as text ("vocab_size" -> "512").
using ErrorFields = std::map<std::string, std::string>;

// Base of every error Loom raises on purpose. Messages name the operation, where it happened
// and expected vs. actual, e.g. "checkpoint: tensor 'fc.weight' has shape [10, 128], expected
// [10, 64]".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ErrorFields fields = {})
      : std::runtime_error(message), fields_(std::move(fields)) {}

  const ErrorFields& fields() const { return fields_; }
  // The field's value, "" when the error has none.
  std::string field(const std::string& name) const {
    const auto it = fields_.find(name);
    return it == fields_.end() ? std::string() : it->second;
  }

 private:
  ErrorFields fields_;
};

// The user's configuration or command line is wrong. Names the key: given as the field "key",
// or, for the many messages written as "config key 'K': ...", taken from the message.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message, ErrorFields fields = {})
      : Error(message, with_key_from(message, std::move(fields))) {}

  // "config key 'KEY': DETAIL", with "key" and any further fields set.
  static ConfigError at_key(const std::string& key, const std::string& detail,
                            ErrorFields fields = {}) {
    fields["key"] = key;
    return ConfigError("config key '" + key + "': " + detail, std::move(fields));
  }

  std::string key() const { return field("key"); }

 private:
  static ErrorFields with_key_from(const std::string& message, ErrorFields fields) {
    if (fields.count("key")) return fields;
    static const std::string kLead = "config key '";
    const size_t at = message.find(kLead);
    if (at == std::string::npos) return fields;
    const size_t begin = at + kLead.size();
    const size_t end = message.find('\'', begin);
    if (end != std::string::npos) fields["key"] = message.substr(begin, end - begin);
    return fields;
  }
};

// Input data is missing, unreadable or malformed. Names the path.
class DataError : public Error {
 public:
  using Error::Error;
};

// A collective or point-to-point operation failed. Names the rank.
class CommError : public Error {
 public:
  using Error::Error;
};

// Something waited longer than its timeout. Names who was waited for.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

}  // namespace loom
