#include "loom/data/synthetic.h"

#include <ATen/CPUGeneratorImpl.h>

#include "loom/core/rng.h"

namespace loom::data {

ImageSet make_synthetic(const SyntheticSpec& spec) {
  const int64_t n = spec.samples, h = spec.height, w = spec.width, c = spec.channels;
  // Prototypes depend on the seed only, so train and test streams share them.
  at::Generator proto_gen = at::make_generator<at::CPUGeneratorImpl>(hash_key({spec.seed, 17}));
  at::Tensor coarse = at::rand({spec.classes, c, 6, 6}, proto_gen);
  at::Tensor prototypes =
      at::upsample_bilinear2d(coarse, {h, w}, /*align_corners=*/false).permute({0, 2, 3, 1});

  at::Generator gen =
      at::make_generator<at::CPUGeneratorImpl>(hash_key({spec.seed, spec.stream, 29}));
  ImageSet set;
  set.classes = spec.classes;
  set.labels = at::empty({n}, at::kLong);
  auto* labels = set.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = static_cast<int64_t>(hash_key({spec.seed, spec.stream, static_cast<uint64_t>(i)}) %
                                     static_cast<uint64_t>(spec.classes));
  }
  set.images = at::empty({n, h, w, c}, at::kByte);
  // In chunks: the float intermediates of a whole ImageNet-sized set would not fit comfortably.
  constexpr int64_t kChunk = 64;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    int64_t end = std::min(n, begin + kChunk);
    at::Tensor noise = at::rand({end - begin, h, w, c}, gen);
    at::Tensor base = prototypes.index_select(0, set.labels.slice(0, begin, end));
    at::Tensor mixed = base.mul(0.6).add_(noise.mul_(0.4)).mul_(255.0).round_().clamp_(0, 255);
    set.images.slice(0, begin, end).copy_(mixed.to(at::kByte));
  }
  return set;
}

}  // namespace loom::data
