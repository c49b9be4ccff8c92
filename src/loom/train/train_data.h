// The training and test data for a config: the configured loaders (local, or fed by remote data
// workers when data.remote.workers names some), and what the model needs to know of them.
#pragma once

#include <memory>
#include <string>

#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/data/feeder.h"
#include "loom/models/model.h"

namespace loom::train {

struct TrainData {
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> test;  // null: no test split (no evaluation)
  data::ChannelStats stats;                 // for normalisation (images)
  models::InputSpec input;
  int loader_threads = 1;
  bool decoded = false;  // encoded images decoded by the loader (not pixels held in memory)
  // Some training targets count in no loss (token shards with loss masks: fine-tuning pairs);
  // the trainer then takes the step's mean over the targets that count.
  bool loss_masked = false;
};

// See data::make_loaders (training batches of `batch_size`); with data.remote.workers the
// training batches come from those workers and from data.remote.local_threads local threads at
// once. Without `with_test` the test split is not opened (`test` is null).
// data.source tokens: windows of the shards in data.path (data::make_token_batches), the
// validation split as the test set.
TrainData load_train_data(const Config& config, int64_t batch_size, int usable_cores, int rank = 0,
                          int world = 1, bool pin_memory = false, bool with_test = true);

// Tokens per window: data.seq_len, or the GPT preset's context. Throws ConfigError naming
// data.seq_len where neither says.
int64_t token_seq_len(const Config& config);

}  // namespace loom::train
