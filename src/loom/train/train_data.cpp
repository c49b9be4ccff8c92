#include "loom/train/train_data.h"

#include "loom/core/error.h"
#include "loom/data/idx.h"
#include "loom/data/synthetic.h"

namespace loom::train {

TrainData load_train_data(const Config& config) {
  const DataConfig& d = config.data;
  const uint64_t seed = static_cast<uint64_t>(config.seed);
  data::ImageSet train_set, test_set;
  if (d.source == "synthetic") {
    data::SyntheticSpec spec;
    spec.height = spec.width = d.image_size;
    spec.channels = d.channels;
    spec.classes = d.classes;
    spec.seed = seed;
    spec.samples = d.train_samples;
    train_set = data::make_synthetic(spec);
    spec.samples = d.test_samples;
    spec.stream = 1;
    test_set = data::make_synthetic(spec);
  } else {
    const std::string hint = d.source == "fashion_mnist" ? "dataset-fashion-mnist" : "";
    train_set = data::load_idx_split(d.path, "train", hint);
    test_set = data::load_idx_split(d.path, "t10k", hint);
    const int64_t classes = std::max(train_set.classes, test_set.classes);
    train_set.classes = test_set.classes = classes;
  }
  if (train_set.images.sizes().slice(1) != test_set.images.sizes().slice(1)) {
    throw DataError("data: training images are " + c10::str(train_set.images.sizes().slice(1)) +
                    " but test images are " + c10::str(test_set.images.sizes().slice(1)));
  }

  TrainData out;
  out.stats = data::channel_stats(train_set);
  out.input = {train_set.channels(), train_set.height(), train_set.width(), train_set.classes};
  data::AugmentSpec augment;
  augment.enabled = d.augment;
  const int64_t train_size = train_set.size(), test_size = test_set.size();
  out.train = std::make_unique<data::Batcher>(std::move(train_set), d.batch_size,
                                              data::EpochOrder(train_size, seed, true), augment,
                                              seed, /*drop_last=*/true);
  out.test = std::make_unique<data::Batcher>(std::move(test_set), d.eval_batch_size,
                                             data::EpochOrder(test_size, seed, false),
                                             data::AugmentSpec{}, seed, /*drop_last=*/false);
  return out;
}

}  // namespace loom::train
