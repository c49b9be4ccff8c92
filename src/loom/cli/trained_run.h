// A language model's run as `loom train` left it, for the commands that read one back
// (`loom generate`, `loom export`): its config.yaml, its last committed checkpoint, the tokenizer
// it trained with, and the model rebuilt from them with the checkpoint's tensors (whatever
// layout wrote it: checkpoints hold whole tensors under the model's names).
#pragma once

#include <memory>
#include <string>

#include "loom/core/config.h"
#include "loom/models/model.h"

namespace loom::cli {

struct TrainedRun {
  Config config;
  std::string checkpoint;  // the last committed one
  std::string tokenizer;   // tokenizer.model: the run's copy, else its token data's
  int64_t vocab = 0;       // the tokenizer's
  std::unique_ptr<models::Model> model;
};

// Loads the run in `run_dir` for `command` ("generate"). Throws ConfigError naming RUN_DIR for a
// folder without config.yaml or whose model is not a language model, DataError for one without
// a committed checkpoint or a tokenizer.
TrainedRun load_trained_run(const std::string& run_dir, const std::string& command);

}  // namespace loom::cli
