#include "loom/data/sample_error.h"

namespace loom::data {

const char* fault_name(SampleFault fault) {
  switch (fault) {
    case SampleFault::kUnreadable:
      return "unreadable";
    case SampleFault::kTruncated:
      return "truncated";
    case SampleFault::kUndecodable:
      return "undecodable";
    case SampleFault::kTooLarge:
      return "too_large";
  }
  return "unknown";
}

}  // namespace loom::data
