// `loom export RUN_DIR --format hf|peft --out DIR [--merge-lora]`: a language model's run as a
// Hugging Face model folder that transformers loads (LlamaForCausalLM, GPT2LMHeadModel): the
// run's last committed checkpoint, whatever layout wrote it (checkpoints hold whole tensors under
// the model's names), under the folder's names, with config.json (a pretrained run's own
// folder's, or one made for the run's shape) and, from a pretrained folder, its tokenizer files.
// A LoRA run exports its adapters in PEFT's format (--format peft), or its weights with the
// adapters merged in (--format hf --merge-lora).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/cli/trained_run.h"
#include "loom/core/error.h"
#include "loom/models/hf_model.h"
#include "loom/models/lora.h"
#include "loom/train/pretrained.h"
#include "loom/train/train_data.h"

namespace loom::cli {
namespace {

struct ExportArgs {
  std::string run_dir, format = "hf", out;
  bool merge_lora = false;
  bool json = false;
};

int run_export(const ExportArgs& a) {
  if (a.format != "hf" && a.format != "peft") {
    throw ConfigError("--format: '" + a.format + "', expected hf or peft");
  }
  const TrainedRun run = load_trained_run(a.run_dir, "export");
  const LoraModelConfig& lora = run.config.model.lora;
  models::NamedTensors tensors = run.model->named_parameters();
  const models::HfModel shape =
      models::hf_model_of(run.config.model, run.vocab, train::token_seq_len(run.config));
  if (a.format == "peft") {
    if (lora.rank == 0) {
      throw ConfigError("--format: peft, but '" + a.run_dir + "' trained no LoRA adapters",
                        {{"problem", "no_adapters"}});
    }
    train::save_peft_adapter(a.out, shape, tensors, lora);
  } else {
    if (lora.rank > 0 && !a.merge_lora) {
      throw ConfigError("--merge-lora: '" + a.run_dir + "' trained LoRA adapters; --format hf " +
                            "writes them merged into the weights (--merge-lora), --format peft " +
                            "apart",
                        {{"problem", "adapters"}});
    }
    if (lora.rank > 0) tensors = models::merge_lora(tensors, lora);
    train::save_hf_folder(a.out, shape, tensors);
  }
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
  sub->add_option("--format", a->format,
                  "hf (config.json, model.safetensors) or peft (a LoRA run's adapters: "
                  "adapter_config.json, adapter_model.safetensors)")
      ->capture_default_str();
  sub->add_flag("--merge-lora", a->merge_lora,
                "--format hf of a LoRA run: the adapters merged into the weights they adapt");
  sub->add_option("--out", a->out, "The folder to write (made; refused where a model is)")
      ->required();
  sub->add_flag("--json", a->json, "One JSON line: checkpoint, format, out, family, tensors");
  return {sub, [a] { return run_export(*a); }};
}

}  // namespace loom::cli
