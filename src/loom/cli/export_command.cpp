// `loom export RUN_DIR --format hf --out DIR`: a language model's run as a Hugging Face model
// folder that transformers loads (LlamaForCausalLM, GPT2LMHeadModel): the run's last committed
// checkpoint, whatever layout wrote it (checkpoints hold whole tensors under the model's names),
// under the folder's names, with config.json (a pretrained run's own folder's, or one made for
// the run's shape) and, from a pretrained folder, its tokenizer files.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/cli/trained_run.h"
#include "loom/core/error.h"
#include "loom/models/hf_model.h"
#include "loom/train/pretrained.h"
#include "loom/train/train_data.h"

namespace loom::cli {
namespace {

struct ExportArgs {
  std::string run_dir, format = "hf", out;
  bool json = false;
};

int run_export(const ExportArgs& a) {
  if (a.format != "hf") throw ConfigError("--format: '" + a.format + "', expected hf");
  const TrainedRun run = load_trained_run(a.run_dir, "export");
  const models::NamedTensors tensors = run.model->named_parameters();
  const models::HfModel shape =
      models::hf_model_of(run.config.model, run.vocab, train::token_seq_len(run.config));
  train::save_hf_folder(a.out, shape, tensors);
  if (a.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"checkpoint", run.checkpoint},
                                               {"format", a.format},
                                               {"out", a.out},
                                               {"family", shape.family},
                                               {"tensors", tensors.size()}}
                            .dump()
                            .c_str());
  } else {
    std::printf("exported %s (%zu tensors) to %s\n", run.checkpoint.c_str(), tensors.size(),
                a.out.c_str());
  }
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* sub = app.add_subcommand(
      "export", "Write a language model's run as a Hugging Face model folder (transformers)");
  sub->add_option("run_dir", a->run_dir, "Output directory of a `loom train` run of a gpt or llama")
      ->required();
  sub->add_option("--format", a->format, "The folder's format: hf (config.json, model.safetensors)")
      ->capture_default_str();
  sub->add_option("--out", a->out, "The folder to write (made; refused where a model is)")
      ->required();
  sub->add_flag("--json", a->json, "One JSON line: checkpoint, format, out, family, tensors");
  return {sub, [a] { return run_export(*a); }};
}

}  // namespace loom::cli
