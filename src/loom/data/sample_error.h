// Why one sample could not be used. The loader counts these per reason and, under the default
// policy, skips the sample; they are DataErrors so that a caller without a policy still gets a
// clear message naming the file.
#pragma once

#include <string>

#include "loom/core/error.h"

namespace loom::data {

enum class SampleFault {
  kUnreadable,   // the file could not be read
  kTruncated,    // the data ends early
  kUndecodable,  // not an image we can decode: wrong magic, corrupt stream
  kTooLarge,     // over the configured pixel limit (decompression bombs)
};

const char* fault_name(SampleFault fault);

class SampleError : public DataError {
 public:
  SampleError(SampleFault fault, const std::string& message) : DataError(message), fault_(fault) {}
  SampleFault fault() const { return fault_; }

 private:
  SampleFault fault_;
};

}  // namespace loom::data
