// The loaders the `data:` section of a configuration describes: the data sets it names, their
// transforms, and this rank's share of them. The trainer, `loom data` and `loom data-worker` all
// build their loaders here, so a remote worker's batches are the trainer's own.
#pragma once

#include <memory>

#include "loom/core/config.h"
#include "loom/data/dataset.h"
#include "loom/data/feeder.h"
#include "loom/data/loader.h"
#include "loom/data/token_batch_source.h"

namespace loom::data {

// The data sets a config names, without loaders or transforms (for `loom data inspect`).
struct DataSets {
  std::shared_ptr<const Dataset> train, test;  // test may be null
};
DataSets open_data_sets(const Config& config);

struct ConfiguredLoaders {
  std::unique_ptr<Loader> train;
  std::unique_ptr<Loader> test;  // null: no test split (no evaluation)
  ChannelStats stats;            // for normalisation
  int channels = 3;
  int64_t height = 0, width = 0;  // of the images the training transforms make
  int64_t classes = 0;
  int threads = 1;       // loader threads each loader was given
  bool decoded = false;  // encoded images decoded by the loader (not pixels held in memory)
};

// Loads (or generates) the data set; `usable_cores` sizes auto loader threads. The training
// loader reads batches of `batch_size` (data.batch_size, or the micro-batch a run's layout plan
// derived from it), this rank's share of every epoch (data.shard); the test loader reads this
// rank's part of the test split (all ranks together read each test sample once). `pin_memory` puts
// batches in page-locked memory for a Feeder on a CUDA device. Throws DataError naming the path
// when files are missing, ConfigError naming the key for inconsistent transforms. Without
// `with_test` the test split is neither opened nor loaded.
ConfiguredLoaders make_loaders(const Config& config, int64_t batch_size, int usable_cores,
                               int rank = 0, int world = 1, bool pin_memory = false,
                               bool with_test = true);

// Batches of token windows of `seq_len` from the shards `loom data tokenize` wrote to data.path
// (data.source tokens): the training ones of this rank's share, and the validation split's
// (val-*.tokens, every window once over all ranks) where there is one and `with_test` asks.
struct ConfiguredTokens {
  std::unique_ptr<TokenBatchSource> train;
  std::unique_ptr<TokenBatchSource> test;  // null: no validation split
  int64_t vocab_size = 0;
  bool loss_masked = false;  // the training shards have loss masks (fine-tuning pairs)
};
ConfiguredTokens make_token_batches(const Config& config, int64_t seq_len, int64_t batch_size,
                                    int rank = 0, int world = 1, bool with_test = true);

// Whether the `loom data tokenize` folder `dir` holds shards of `split` ("train", "val").
bool has_token_split(const std::string& dir, const std::string& split);

// This rank's training batches as `loom data-worker` builds them for a trainer: images through
// make_loaders (its threads idle), token windows of data.seq_len through make_token_batches.
std::unique_ptr<LocalBatchSource> make_training_batches(const Config& config, int64_t batch_size,
                                                        int rank, int world);

}  // namespace loom::data
