// A seeded synthetic image set: each class has a smooth random prototype and each sample is its
// class prototype plus noise, so a model can learn it and runs are repeatable.
#pragma once

#include <cstdint>

#include "loom/data/image_set.h"

namespace loom::data {

struct SyntheticSpec {
  int64_t samples = 1024;
  int64_t height = 224, width = 224, channels = 3;
  int64_t classes = 10;
  uint64_t seed = 0;
  uint64_t stream = 0;  // 0 = train, 1 = test: same prototypes, different samples
};

ImageSet make_synthetic(const SyntheticSpec& spec);

}  // namespace loom::data
