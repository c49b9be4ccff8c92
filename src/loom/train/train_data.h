// The training and test data for a config: batchers over the configured source and the feeder
// that turns their uint8 batches into model input.
#pragma once

#include <memory>

#include "loom/core/config.h"
#include "loom/data/batcher.h"
#include "loom/data/feeder.h"
#include "loom/models/model.h"

namespace loom::train {

struct TrainData {
  std::unique_ptr<data::Batcher> train;
  std::unique_ptr<data::Batcher> test;
  data::ChannelStats stats;  // of the training images, for normalisation
  models::InputSpec input;
};

// Loads (or generates) the data set. Throws DataError naming the path when files are missing.
TrainData load_train_data(const Config& config);

}  // namespace loom::train
