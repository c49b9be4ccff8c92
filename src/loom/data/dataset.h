// A source of samples: size() and read(index), thread-safe, so that loader workers can read
// concurrently. Sources are small and composable; decoding and transforms happen in the loader,
// not here. A sample is either encoded bytes (files, shards) or pixels (sets held in memory).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

struct Sample {
  std::string bytes;  // the encoded image (JPEG or PNG), or empty when `pixels` is set
  at::Tensor pixels;  // uint8 [H, W, C], for in-memory sets
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
