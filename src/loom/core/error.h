// Loom's error types. Library code raises; only cli/ turns errors into exit codes
// (ConfigError -> 2, everything else -> 1).
#pragma once

#include <stdexcept>
#include <string>

namespace loom {

// Base of every error Loom raises on purpose. Messages name the operation, where it happened
// and expected vs. actual, e.g. "checkpoint: tensor 'fc.weight' has shape [10, 128], expected
// [10, 64]".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user's configuration or command line is wrong. Names the key.
class ConfigError : public Error {
 public:
  using Error::Error;
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
