// `loom generate RUN_DIR --prompt TEXT --tokens N [--temperature T --top-k K --seed S
// --ignore-eos --no-cache --json]`: text from a language model that `loom train` trained, continued
// from a prompt. The model is rebuilt from the run's config.yaml, its tensors come from the run's
// last committed checkpoint (whatever layout wrote it), and the prompt is encoded with the run's
// own tokenizer (the copy in RUN_DIR, else the one beside its token data). Tokens are drawn one at
// a time with a KV cache (--no-cache: the whole window run again for every token, the baseline a
// cache is measured against); the draws are a pure function of --seed. Past the model's context the
// window slides: each token is drawn from the last `context` ones.
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/cli/trained_run.h"
#include "loom/core/error.h"
#include "loom/data/tokenizer.h"
#include "loom/models/decoding.h"
#include "loom/models/model.h"
#include "loom/models/module_model.h"
#include "loom/train/checkpoint.h"
#include "loom/train/train_data.h"

namespace loom::cli {
namespace {

struct GenerateArgs {
  std::string run_dir, prompt;
  int64_t tokens = 100;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;
  bool ignore_eos = false;
  bool no_cache = false;
  bool json = false;
};

int run_generate(const GenerateArgs& a) {
  if (a.temperature < 0) throw ConfigError("--temperature: must be >= 0 (0: the likeliest token)");
  if (a.top_k < 0) throw ConfigError("--top-k: must be >= 0 (0: every token)");
  const TrainedRun run = load_trained_run(a.run_dir, "generate");
  const std::string& checkpoint = run.checkpoint;
  const data::Tokenizer tokenizer = data::Tokenizer::load(run.tokenizer);
  models::Model* model = run.model.get();
  auto* zoo = dynamic_cast<models::ModuleModel*>(model);
  if (!zoo) throw Error("generate: model '" + model->name() + "' is not one of the zoo's");

  // An empty prompt starts a new document, as the end-of-text id does in the shards.
  std::vector<int64_t> prompt;
  for (int32_t id : tokenizer.encode(a.prompt)) prompt.push_back(id);
  if (prompt.empty()) prompt.push_back(tokenizer.eos_id());
  models::Sampling sampling;
  sampling.temperature = a.temperature;
  sampling.top_k = a.top_k;
  sampling.seed = a.seed;
  sampling.stop_id = a.ignore_eos ? -1 : tokenizer.eos_id();
  sampling.use_cache = !a.no_cache;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<int64_t> drawn = models::generate(zoo->module(), prompt, a.tokens, sampling);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // SentencePiece marks a word's leading space on the word itself, so the continuation reads
  // right only when decoded together with the prompt ("software;" not "software ;"): decode
  // both, and the continuation is what follows the prompt's own decoding.
  std::vector<int32_t> prompt_ids, all_ids;
  for (int64_t id : prompt) {
    if (id != tokenizer.eos_id()) prompt_ids.push_back(static_cast<int32_t>(id));
  }
  all_ids = prompt_ids;
  for (int64_t id : drawn) {
    if (id != tokenizer.eos_id()) all_ids.push_back(static_cast<int32_t>(id));
  }
  const std::string whole = tokenizer.decode(all_ids);
  const std::string prompt_text = tokenizer.decode(prompt_ids);
  const std::string text =
      whole.compare(0, prompt_text.size(), prompt_text) == 0
          ? whole.substr(prompt_text.size())
          : tokenizer.decode({all_ids.begin() + prompt_ids.size(), all_ids.end()});
  if (a.json) {
    std::printf("%s\n", nlohmann::ordered_json{{"checkpoint", checkpoint},
                                               {"prompt", a.prompt},
                                               {"text", text},
                                               {"output", whole},
                                               {"tokens", drawn},
                                               {"kv_cache", !a.no_cache},
                                               {"decode_seconds", seconds},
                                               {"seed", a.seed}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%s\n", whole.c_str());
  }
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand(
      "generate", "Continue a prompt with a language model trained by `loom train` (KV cache)");
  sub->add_option("run_dir", a->run_dir, "Output directory of a `loom train` run of a gpt or llama")
      ->required();
  sub->add_option("--prompt", a->prompt, "Text to continue (default: a new paragraph)");
  sub->add_option("--tokens", a->tokens, "Tokens to draw at most (stops early at end of text)")
      ->capture_default_str();
  sub->add_option("--temperature", a->temperature, "Softmax temperature; 0 = always the likeliest")
      ->capture_default_str();
  sub->add_option("--top-k", a->top_k, "Draw from the k likeliest tokens only; 0 = from all")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "Seed of the draws: the same seed, the same text")
      ->capture_default_str();
  sub->add_flag("--ignore-eos", a->ignore_eos,
                "Draw all --tokens, going on past an end of text (whose id the text leaves out)");
  sub->add_flag("--no-cache", a->no_cache,
                "Run the whole window again for every token instead of caching keys and values "
                "(the same tokens, slower: what the cache saves)");
  sub->add_flag("--json", a->json,
                "One JSON line: checkpoint, prompt, text, token ids, decode_seconds");
  return {sub, [a] { return run_generate(*a); }};
}

}  // namespace loom::cli
