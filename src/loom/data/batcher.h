// Assembles uint8 batches from an in-memory ImageSet in EpochOrder, with optional light
// augmentation keyed by (seed, epoch, sample index). Stateless between calls: batch k of epoch
// e is always the same, which is what exact resume needs. Thread-safe (const methods only).
#pragma once

#include <ATen/ATen.h>

#include "loom/data/batch_source.h"
#include "loom/data/epoch_order.h"
#include "loom/data/image_set.h"

namespace loom::data {

struct AugmentSpec {
  bool enabled = false;
  int max_shift = 2;  // pixels, each direction, zero-filled
  bool flip = true;   // horizontal, with probability 1/2
};

class Batcher : public BatchSource {
 public:
  // drop_last: training batches are all full; evaluation keeps the short final batch.
  Batcher(ImageSet set, int64_t batch_size, EpochOrder order, AugmentSpec augment, uint64_t seed,
          bool drop_last);

  int64_t steps_per_epoch() const override { return steps_; }
  int64_t samples() const override { return set_.size(); }
  int64_t batch_size() const { return batch_size_; }
  const ImageSet& set() const { return set_; }

  Batch batch(int64_t epoch, int64_t step) const override;

 private:
  void augment_in_place(at::Tensor image, int64_t epoch, int64_t index) const;

  ImageSet set_;
  int64_t batch_size_;
  EpochOrder order_;
  AugmentSpec augment_;
  uint64_t seed_;
  int64_t steps_ = 0;
};

}  // namespace loom::data
