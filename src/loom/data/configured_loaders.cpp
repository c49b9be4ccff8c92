#include "loom/data/configured_loaders.h"

#include <filesystem>

#include "loom/core/error.h"
#include "loom/data/idx.h"
#include "loom/data/image_folder.h"
#include "loom/data/in_memory_dataset.h"
#include "loom/data/synthetic.h"
#include "loom/data/tar_shards.h"

namespace loom::data {
namespace {

// The two splits of a source, before loaders and transforms.
struct Splits {
  std::shared_ptr<const Dataset> train, test;  // test may be null
  int channels = 3;
  int height = 0, width = 0;  // 0: each image has its own size
  ChannelStats stats;         // unless the transforms normalize
  std::vector<TransformConfig> default_train, default_eval;
};

// Fashion-MNIST and other IDX sets, and synthetic images: held in memory as pixels.
Splits in_memory_splits(const Config& config) {
  const DataConfig& d = config.data;
  ImageSet train_set, test_set;
  if (d.source == "synthetic") {
    SyntheticSpec spec;
    spec.height = spec.width = d.image_size;
    spec.channels = d.channels;
    spec.classes = d.classes;
    spec.seed = static_cast<uint64_t>(config.seed);
    spec.samples = d.train_samples;
    train_set = make_synthetic(spec);
    spec.samples = d.test_samples;
    spec.stream = 1;
    test_set = make_synthetic(spec);
  } else {
    const std::string hint = d.source == "fashion_mnist" ? "dataset-fashion-mnist" : "";
    train_set = load_idx_split(d.path, "train", hint);
    test_set = load_idx_split(d.path, "t10k", hint);
    train_set.classes = test_set.classes = std::max(train_set.classes, test_set.classes);
  }
  if (train_set.images.sizes().slice(1) != test_set.images.sizes().slice(1)) {
    throw DataError("data: training images are " + c10::str(train_set.images.sizes().slice(1)) +
                    " but test images are " + c10::str(test_set.images.sizes().slice(1)));
  }
  Splits s;
  s.channels = static_cast<int>(train_set.channels());
  s.height = static_cast<int>(train_set.height());
  s.width = static_cast<int>(train_set.width());
  s.stats = channel_stats(train_set);
  if (d.augment) {  // the classic small-image augmentation: shift by up to 2 pixels, flip
    s.default_train = {
        {"random_crop", {{"size", {double(s.height), double(s.width)}}, {"padding", {2}}}},
        {"random_horizontal_flip", {}}};
  }
  s.train = std::make_shared<InMemoryDataset>(std::move(train_set));
  s.test = std::make_shared<InMemoryDataset>(std::move(test_set));
  return s;
}

std::shared_ptr<const Dataset> open_encoded(const std::string& source, const std::string& path) {
  if (source == "tar_shards") return std::make_shared<TarShards>(path);
  return std::make_shared<ImageFolder>(path);
}

// Encoded images (image folders, tar shards), decoded on loader threads.
// Without `with_test` the validation folder is not opened.
Splits encoded_splits(const Config& config, bool with_test = true) {
  const DataConfig& d = config.data;
  Splits s;
  auto train = open_encoded(d.source, d.path);
  if (!d.val_path.empty() && with_test) {
    auto test = open_encoded(d.source, d.val_path);
    if (test->class_names().size() != train->class_names().size()) {
      throw DataError("data sets '" + d.path + "' and '" + d.val_path + "' have " +
                      std::to_string(train->class_names().size()) + " and " +
                      std::to_string(test->class_names().size()) + " classes");
    }
    s.test = test;
  }
  s.train = train;
  // ImageNet's channel statistics: measuring a folder's own would mean decoding all of it.
  s.stats = {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
  s.default_train = default_train_transforms(static_cast<int>(d.image_size));
  s.default_eval = default_eval_transforms(static_cast<int>(d.image_size));
  return s;
}

BadSamplePolicy bad_sample_policy(const std::string& name) {
  if (name == "fail") return BadSamplePolicy::kFail;
  if (name == "substitute") return BadSamplePolicy::kSubstitute;
  return BadSamplePolicy::kSkip;
}

std::shared_ptr<const TransformPipeline> pipeline(const std::vector<TransformConfig>& given,
                                                  const std::vector<TransformConfig>& fallback,
                                                  const Splits& s, const char* key) {
  return std::make_shared<TransformPipeline>(given.empty() ? fallback : given, s.channels, s.height,
                                             s.width, key);
}

bool is_encoded(const DataConfig& d) {
  return d.source == "image_folder" || d.source == "tar_shards";
}

}  // namespace

DataSets open_data_sets(const Config& config) {
  Splits s = is_encoded(config.data) ? encoded_splits(config) : in_memory_splits(config);
  return {s.train, s.test};
}

ConfiguredLoaders make_loaders(const Config& config, int64_t batch_size, int usable_cores, int rank,
                               int world, bool pin_memory, bool with_test) {
  const DataConfig& d = config.data;
  const bool encoded = is_encoded(d);
  Splits splits = encoded ? encoded_splits(config, with_test) : in_memory_splits(config);

  LoaderOptions options;
  // Pixels in memory need little work per sample: one thread keeps up and leaves the cores to
  // compute. Decoding needs them all.
  options.threads = d.workers > 0 ? static_cast<int>(d.workers) : encoded ? usable_cores : 1;
  options.prefetch_batches = static_cast<int>(d.prefetch_batches);
  options.prefetch_bytes = d.prefetch_bytes;
  options.seed = static_cast<uint64_t>(config.seed);
  options.policy = bad_sample_policy(d.bad_samples);
  options.max_bad_fraction = d.max_bad_fraction;
  options.max_pixels = d.max_pixels;
  options.batch_size = batch_size;
  options.pin_memory = pin_memory;
  options.transforms = pipeline(d.transforms, splits.default_train, splits, "data.transforms");
  const TransformPipeline& train_transforms = *options.transforms;

  ConfiguredLoaders out;
  out.threads = options.threads;
  out.decoded = encoded;
  out.stats = train_transforms.normalize().value_or(splits.stats);
  out.channels = splits.channels;
  out.height = train_transforms.height();
  out.width = train_transforms.width();
  out.classes = static_cast<int64_t>(splits.train->class_names().size());
  const int64_t train_size = splits.train->size();
  const auto shard_mode =
      d.shard == "pad" ? EpochOrder::ShardMode::kPad : EpochOrder::ShardMode::kDrop;
  out.train = std::make_unique<Loader>(
      splits.train, EpochOrder(train_size, options.seed, true).shard(rank, world, shard_mode),
      options);
  if (splits.test && with_test) {
    options.batch_size = d.eval_batch_size;
    options.drop_last = false;
    options.transforms =
        pipeline(d.eval_transforms, splits.default_eval, splits, "data.eval_transforms");
    if (options.transforms->height() != train_transforms.height() ||
        options.transforms->width() != train_transforms.width()) {
      throw ConfigError("config key 'data.eval_transforms': they make " +
                        std::to_string(options.transforms->height()) + "x" +
                        std::to_string(options.transforms->width()) +
                        " images but data.transforms make " +
                        std::to_string(train_transforms.height()) + "x" +
                        std::to_string(train_transforms.width()));
    }
    const auto& eval_normalize = options.transforms->normalize();
    if (eval_normalize &&
        (eval_normalize->mean != out.stats.mean || eval_normalize->stddev != out.stats.stddev)) {
      throw ConfigError(
          "config key 'data.eval_transforms': its normalize differs from the one training uses; "
          "the feeder normalises both the same way, so give it in data.transforms only");
    }
    // Each rank evaluates its own part; together they see every test sample once.
    const int64_t test_size = splits.test->size();
    out.test = std::make_unique<Loader>(splits.test,
                                        EpochOrder(test_size, options.seed, false)
                                            .shard(rank, world, EpochOrder::ShardMode::kExact),
                                        options);
  }
  return out;
}

ConfiguredTokens make_token_batches(const Config& config, int64_t seq_len, int64_t batch_size,
                                    int rank, int world, bool with_test) {
  const std::string& dir = config.data.path;
  const auto seed = static_cast<uint64_t>(config.seed);
  auto train = std::make_shared<const TokenWindows>(
      TokenWindows::open(dir, "train", seq_len, seed, rank, world));
  ConfiguredTokens out;
  out.vocab_size = train->vocab_size();
  out.loss_masked = train->loss_masked();
  out.train = std::make_unique<TokenBatchSource>(train, batch_size);
  if (with_test && has_token_split(dir, "val")) {
    auto val = std::make_shared<const TokenWindows>(
        TokenWindows::open(dir, "val", seq_len, seed, rank, world, EpochOrder::ShardMode::kExact));
    if (val->size() > 0) {
      out.test = std::make_unique<TokenBatchSource>(val, config.data.eval_batch_size,
                                                    /*drop_last=*/false);
    }
  }
  return out;
}

bool has_token_split(const std::string& dir, const std::string& split) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(split + "-", 0) == 0 && entry.path().extension() == ".tokens") return true;
  }
  return false;
}

std::unique_ptr<LocalBatchSource> make_training_batches(const Config& config, int64_t batch_size,
                                                        int rank, int world) {
  if (config.data.source == "tokens") {
    if (config.data.seq_len <= 0) {
      throw ConfigError("config key 'data.seq_len': a data worker needs the window length");
    }
    return make_token_batches(config, config.data.seq_len, batch_size, rank, world, false).train;
  }
  Config idle = config;
  idle.data.workers = 1;  // the loader's own threads stay idle: the caller builds batches
  return make_loaders(idle, batch_size, 1, rank, world, false, false).train;
}

}  // namespace loom::data
