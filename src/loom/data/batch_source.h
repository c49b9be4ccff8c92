// What the trainer draws batches from: batch `step` of `epoch`, always the same batch for the
// same arguments (which is what exact resume rests on). Implementations may prefetch on the
// assumption that steps are asked for in order (their prefetch state is internal, hence the
// const interface); any other order still returns the right batch.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace loom::data {

struct Batch {
  at::Tensor images;  // uint8 [B, H, W, C]
  at::Tensor labels;  // int64 [B]
};

// Batches in an epoch of `samples`: full batches only (drop_last), or with a short last one.
// Throws ConfigError naming data.batch_size when not even one batch fits.
int64_t batches_per_epoch(int64_t samples, int64_t batch_size, bool drop_last);

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t steps_per_epoch() const = 0;
  virtual int64_t samples() const = 0;  // in the underlying data set
  virtual Batch batch(int64_t epoch, int64_t step) const = 0;
};

}  // namespace loom::data
