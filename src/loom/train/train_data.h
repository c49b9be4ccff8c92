// The training and test data for a config: loaders over the configured source, and the statistics
// the feeder uses to turn their uint8 batches into model input.
#pragma once

#include <memory>

#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/data/dataset.h"
#include "loom/data/feeder.h"
#include "loom/models/model.h"

namespace loom::train {

struct TrainData {
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> test;  // null: no test split (no evaluation)
  data::ChannelStats stats;                 // for normalisation
  models::InputSpec input;
  int loader_threads = 1;
  bool decoded = false;  // encoded images decoded by the loader (not pixels held in memory)
};

// The data sets a config names, without loaders or transforms (for `loom data inspect`).
struct DataSets {
  std::shared_ptr<const data::Dataset> train, test;  // test may be null
};
DataSets open_data_sets(const Config& config);

// Loads (or generates) the data set; `usable_cores` sizes auto loader threads. The training
// loader reads this rank's share of every epoch (data.shard); the test loader reads this rank's
// part of the test split (all ranks together read each test sample once). `pin_memory` puts
// batches in page-locked memory for a Feeder on a CUDA device. Throws DataError naming the path
// when files are missing.
TrainData load_train_data(const Config& config, int usable_cores, int rank = 0, int world = 1,
                          bool pin_memory = false);

}  // namespace loom::train
