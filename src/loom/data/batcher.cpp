#include "loom/data/batcher.h"

#include <cstring>
#include <string>

#include "loom/core/error.h"
#include "loom/core/rng.h"

namespace loom::data {

Batcher::Batcher(ImageSet set, int64_t batch_size, EpochOrder order, AugmentSpec augment,
                 uint64_t seed, bool drop_last)
    : set_(std::move(set)), batch_size_(batch_size), order_(order), augment_(augment), seed_(seed) {
  if (order_.total() != set_.size()) {
    throw Error("batcher: order covers " + std::to_string(order_.total()) + " samples, set has " +
                std::to_string(set_.size()));
  }
  steps_ = batches_per_epoch(order_.size(), batch_size_, drop_last);  // this rank's share
}

Batch Batcher::batch(int64_t epoch, int64_t step) const {
  const int64_t begin = step * batch_size_;
  const int64_t count = std::min(batch_size_, order_.size() - begin);
  if (step < 0 || step >= steps_per_epoch()) {
    throw Error("batcher: step " + std::to_string(step) + " is outside the epoch's " +
                std::to_string(steps_per_epoch()) + " steps");
  }
  at::Tensor indices = at::empty({count}, at::kLong);
  auto* idx = indices.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) idx[i] = order_.index_at(epoch, begin + i);
  Batch out{set_.images.index_select(0, indices), set_.labels.index_select(0, indices)};
  if (augment_.enabled) {
    for (int64_t i = 0; i < count; ++i) augment_in_place(out.images[i], epoch, idx[i]);
  }
  return out;
}

void Batcher::augment_in_place(at::Tensor image, int64_t epoch, int64_t index) const {
  KeyedRng rng(hash_key({seed_, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index), 101}));
  const int span = 2 * augment_.max_shift + 1;
  const int64_t dy = static_cast<int64_t>(rng.below(span)) - augment_.max_shift;
  const int64_t dx = static_cast<int64_t>(rng.below(span)) - augment_.max_shift;
  const bool flip = augment_.flip && rng.below(2) == 1;
  if (dx == 0 && dy == 0 && !flip) return;

  const int64_t h = image.size(0), w = image.size(1), c = image.size(2);
  at::Tensor source = image.clone();
  const uint8_t* src = source.data_ptr<uint8_t>();
  uint8_t* dst = image.data_ptr<uint8_t>();
  std::memset(dst, 0, static_cast<size_t>(h * w * c));
  for (int64_t y = 0; y < h; ++y) {
    const int64_t sy = y - dy;
    if (sy < 0 || sy >= h) continue;
    for (int64_t x = 0; x < w; ++x) {
      const int64_t shifted = x - dx;
      if (shifted < 0 || shifted >= w) continue;
      const int64_t sx = flip ? w - 1 - shifted : shifted;
      std::memcpy(dst + (y * w + x) * c, src + (sy * w + sx) * c, static_cast<size_t>(c));
    }
  }
}

}  // namespace loom::data
