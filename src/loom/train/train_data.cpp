#include "loom/train/train_data.h"

#include "loom/core/error.h"
#include "loom/data/batcher.h"
#include "loom/data/idx.h"
#include "loom/data/image_folder.h"
#include "loom/data/image_loader.h"
#include "loom/data/synthetic.h"

namespace loom::train {
namespace {

// In-memory sources: Fashion-MNIST and other IDX sets, and synthetic images.
TrainData in_memory_data(const Config& config) {
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

// Encoded images decoded on loader threads.
TrainData image_folder_data(const Config& config, int usable_cores) {
  const DataConfig& d = config.data;
  const uint64_t seed = static_cast<uint64_t>(config.seed);
  data::LoaderOptions options;
  options.threads = d.workers > 0 ? static_cast<int>(d.workers) : usable_cores;
  options.prefetch_batches = static_cast<int>(d.prefetch_batches);
  options.seed = seed;
  options.policy =
      d.bad_samples == "fail" ? data::BadSamplePolicy::kFail : data::BadSamplePolicy::kSkip;
  options.max_bad_fraction = d.max_bad_fraction;
  options.transform.crop.size = static_cast<int>(d.image_size);
  options.transform.max_pixels = d.max_pixels;

  TrainData out;
  auto train_folder = std::make_shared<data::ImageFolder>(d.path);
  const int64_t classes = static_cast<int64_t>(train_folder->class_names().size());
  // ImageNet's channel statistics: measuring a folder's own would mean decoding all of it.
  out.stats = {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
  out.input = {3, d.image_size, d.image_size, classes};
  options.batch_size = d.batch_size;
  data::EpochOrder train_order(train_folder->size(), seed, true);
  out.train = std::make_unique<data::ImageLoader>(std::move(train_folder), train_order, options);
  if (!d.val_path.empty()) {
    auto val_folder = std::make_shared<data::ImageFolder>(d.val_path);
    if (val_folder->class_names().size() != static_cast<size_t>(classes)) {
      throw DataError("image folders '" + d.path + "' and '" + d.val_path + "' have " +
                      std::to_string(classes) + " and " +
                      std::to_string(val_folder->class_names().size()) + " classes");
    }
    options.batch_size = d.eval_batch_size;
    options.drop_last = false;
    options.transform.train = false;
    data::EpochOrder val_order(val_folder->size(), seed, false);
    out.test = std::make_unique<data::ImageLoader>(std::move(val_folder), val_order, options);
  }
  return out;
}

}  // namespace

TrainData load_train_data(const Config& config, int usable_cores) {
  return config.data.source == "image_folder" ? image_folder_data(config, usable_cores)
                                              : in_memory_data(config);
}

}  // namespace loom::train
