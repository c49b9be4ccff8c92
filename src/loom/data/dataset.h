// A source of encoded samples: size() and read(index), thread-safe, so that loader workers can
// read concurrently. Sources are small and composable; decoding and transforms happen in the
// loader, not here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

struct Sample {
  std::string bytes;  // the encoded image (JPEG or PNG)
  int64_t label = 0;
  std::string key;  // where it came from, for messages (a path, or shard:member)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Throws SampleError (kUnreadable) when the sample cannot be read.
  virtual Sample read(int64_t index) const = 0;
  virtual const std::vector<std::string>& class_names() const = 0;
};

}  // namespace loom::data
