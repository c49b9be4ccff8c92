#include "loom/cli/trained_run.h"

#include <filesystem>

#include "loom/cli/commands.h"
#include "loom/core/error.h"
#include "loom/data/tokenizer.h"
#include "loom/models/lora.h"
#include "loom/train/checkpoint.h"
#include "loom/train/train_data.h"

namespace loom::cli {
namespace {

std::string tokenizer_of(const std::string& run_dir, const Config& config,
                         const std::string& command) {
  for (const std::string& dir : {run_dir, config.data.path}) {
    if (std::string path = data::tokenizer_file_in(dir); !path.empty()) return path;
  }
  if (!std::filesystem::is_directory(config.data.path)) {
    throw DataError(command + ": '" + run_dir + "' has no tokenizer and its token folder " +
                    "(data.path '" + config.data.path + "') is missing");
  }
  throw DataError(command + ": no tokenizer.model or tokenizer.json in '" + run_dir +
                  "' or in its data.path '" + config.data.path + "'");
}

}  // namespace

TrainedRun load_trained_run(const std::string& run_dir, const std::string& command) {
  if (!std::filesystem::exists(run_dir + "/config.yaml")) {
    throw ConfigError("RUN_DIR: no config.yaml in '" + run_dir +
                      "' (is it the output directory of `loom train`?)");
  }
  TrainedRun run;
  run.config = load_run_config({run_dir + "/config.yaml"}, {});
  if (!models::is_language_model(run.config.model.name)) {
    throw ConfigError("RUN_DIR: '" + run_dir + "' trained " + run.config.model.name +
                      ", not a language model (model.name: gpt or llama)");
  }
  // (A store would make the folder where there is none: look first, change nothing.)
  const std::string checkpoints = run_dir + "/checkpoints";
  const std::optional<std::string> checkpoint =
      std::filesystem::is_directory(checkpoints)
          ? train::CheckpointStore(checkpoints, 1, 0).latest()
          : std::nullopt;
  if (!checkpoint) throw DataError(command + ": '" + run_dir + "' has no committed checkpoint");
  run.checkpoint = *checkpoint;
  run.tokenizer = tokenizer_of(run_dir, run.config, command);
  models::InputSpec input;
  input.task = models::Task::kLanguageModel;
  run.vocab = data::Tokenizer::load(run.tokenizer).vocab_size();
  input.classes = run.vocab;
  input.seq_len = train::token_seq_len(run.config);
  run.model = models::make_model(run.config.model, input);
  if (run.config.model.lora.rank > 0) models::apply_lora(*run.model, run.config.model.lora);
  train::restore_model(train::CheckpointStore::load(run.checkpoint), run.checkpoint,
                       run.model->named_parameters(), run.model->named_buffers());
  return run;
}

}  // namespace loom::cli
