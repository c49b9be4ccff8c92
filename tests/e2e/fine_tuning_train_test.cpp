// The Llama family and fine-tuning what users have, with `loom train` as a user runs it, on the
// Jargon File tokenized once (language_model_fixture.h): a Llama in every layout, Hugging Face
// folders in and out (transformers' logits the reference), LoRA adapters (peft loads them), and
// prompt/response pairs whose prompts count in no loss. Every layout must train like one process.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "e2e/json_output.h"
#include "e2e/language_model_fixture.h"
#include "loom/data/text_corpus.h"
#include "loom/models/hf_model.h"
#include "loom/train/pretrained.h"
#include "loom/train/safetensors.h"
#include "tools/build_paths.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// `args` with the GPT of gpt_args() replaced by `model` (--set flags).
std::string with_model(std::string args, const std::string& model) {
  const std::string gpt =
      " --set model=gpt --set model.gpt.n_layer=2 --set model.gpt.n_embd=64"
      " --set model.gpt.n_head=4";
  const size_t at = args.find(gpt);
  EXPECT_NE(at, std::string::npos);
  return at == std::string::npos ? args : args.replace(at, gpt.size(), model);
}

// Every tensor of two safetensors files, by name, bit for bit.
void expect_same_tensors(const std::string& a, const std::string& b) {
  const models::NamedTensors x = train::read_safetensors(a), y = train::read_safetensors(b);
  std::map<std::string, at::Tensor> by_name(y.begin(), y.end());
  EXPECT_EQ(x.size(), y.size());
  for (const auto& [name, t] : x) {
    const auto it = by_name.find(name);
    ASSERT_NE(it, by_name.end()) << name;
    EXPECT_TRUE(t.dtype() == it->second.dtype() && at::equal(t, it->second)) << name;
  }
}

// A Llama (grouped-query attention, rotary positions, RMSNorm, SwiGLU; its head tied to the
// token embedding) trains like one process split over a tensor group, in a pipeline of two
// stages (the tied matrix on both ends) and with its parameters sharded (ZeRO-3).
TEST_F(LanguageModelTrain, ALlamaTrainsLikeOneProcessInEveryLayout) {
  TempDir dir;
  const std::string args =
      with_model(gpt_args(),
                 " --set model=llama --set model.llama.n_layer=2 --set model.llama.n_embd=64"
                 " --set model.llama.n_head=4 --set model.llama.n_kv_head=2"
                 " --set model.llama.hidden=128");
  const auto one = run_loom("train" + args + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(summary_of(dir / "one")["model"], "llama");
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"tensor", " --set data.batch_size=8 --set parallel.tensor=2"},
      {"pipeline", pipelined(2, 4, "1f1b")},
      {"zero3", " --set data.global_batch=8 --set parallel.zero=3"}};
  for (const auto& [name, layout] : layouts) {
    SCOPED_TRACE(name);
    const auto run = run_loom(launch(2, args + layout + " --out " + (dir / name)));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(dir / name, dir / "one");
  }
}

// Hugging Face folders in and out. A Llama transformers made starts a run (model.pretrained):
// with a learning rate of 0, in one process, a tensor group, a pipeline and under ZeRO-3, the
// runs evaluate it alike and their exports (`loom export --format hf`) hold the folder's tensors
// bit for bit. A run from it trained on in a tensor group, and a Llama and a GPT trained from
// scratch (whose config.json Loom writes), export folders that transformers loads with the
// logits Loom computes from them.
TEST_F(LanguageModelTrain, HuggingFaceFoldersGoInAndOut) {
  const std::string python = torch_python();
  if (python.empty() || run_command(python + " -c 'import transformers'").exit_code != 0) {
    GTEST_SKIP() << "no Python with transformers (LOOM_PYTHON, scripts/requirements.txt)";
  }
  TempDir dir;
  const std::string script = source_dir() + "/tests/unit/train/make_hf_folders.py";
  const auto made = run_command(python + " " + script + " " + (dir / "hf") + " --vocab 1000");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string llama = with_model(gpt_args(), " --set model=llama");
  const std::string pretrained = llama + " --set model.pretrained=" + (dir / "hf/llama");

  // At a learning rate of 0, every layout loads the same tensors and gives them back whole.
  const std::string still = pretrained + " --set optimizer.lr=0 --set train.max_steps=1";
  auto run = run_loom("train" + still + " --out " + (dir / "still"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const double test_loss = summary_of(dir / "still")["test_loss"].get<double>();
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"one", ""},
           {"tensor", " --set parallel.tensor=2"},
           {"pipeline", pipelined(2, 4, "1f1b")},
           {"zero3", " --set data.global_batch=8 --set parallel.zero=3"}}) {
    SCOPED_TRACE(name);
    const std::string out = dir / ("still_" + name);
    if (name != "one") {
      run = run_loom(launch(2, still + layout + " --out " + out));
      ASSERT_EQ(run.exit_code, 0) << run.output;
      // The pretrained model's validation loss, whichever layout evaluated it.
      EXPECT_NEAR(summary_of(out)["test_loss"].get<double>(), test_loss, 1e-5 * test_loss);
    }
    run = run_loom("export " + (name == "one" ? dir / "still" : out) + " --format hf --out " +
                   (out + "_hf"));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_same_tensors(out + "_hf/model.safetensors", dir / "hf/llama/model.safetensors");
  }
  // A folder that holds a model is not written over.
  EXPECT_EQ(run_loom("export " + (dir / "still") + " --out " + (dir / "still_one_hf")).exit_code,
            2);
  // A folder in bf16 (as most published ones are) comes back in bf16, bit for bit.
  const auto bf16 =
      run_command(python + " " + script + " --bf16 " + (dir / "hf/llama") + " " + (dir / "bf16"));
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  run = run_loom("train" + llama + " --set model.pretrained=" + (dir / "bf16") +
                 " --set optimizer.lr=0 --set train.max_steps=1 --out " + (dir / "still_bf16"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = run_loom("export " + (dir / "still_bf16") + " --out " + (dir / "still_bf16_hf"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  expect_same_tensors(dir / "still_bf16_hf/model.safetensors", dir / "bf16/model.safetensors");

  const std::vector<std::pair<std::string, std::string>> runs = {
      {"tensor", launch(2, pretrained + " --set parallel.tensor=2 --set train.max_steps=4")},
      {"llama", "train" + llama + " --set train.max_steps=2"},
      {"gpt", "train" + gpt_args() + " --set train.max_steps=2"}};
  std::string folders;
  for (const auto& [name, command] : runs) {
    run = run_loom(command + " --out " + (dir / name));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    run = run_loom("export " + (dir / name) + " --out " + (dir / (name + "_hf")));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    folders += " " + (dir / (name + "_hf")) + " " + (dir / (name + ".logits"));
  }
  const auto logits = run_command(python + " " + script + " --logits" + folders);
  ASSERT_EQ(logits.exit_code, 0) << logits.output;
  for (const auto& [name, command] : runs) {
    SCOPED_TRACE(name);
    const std::string folder = dir / (name + "_hf");
    const models::NamedTensors reference = train::read_safetensors(dir / (name + ".logits"));
    ModelConfig config;
    config.name = models::read_hf_config(folder).family;
    config.pretrained = folder;
    models::InputSpec input;
    input.task = models::Task::kLanguageModel;
    input.classes = 1000;
    input.seq_len = 32;
    const auto model = models::make_model(config, input);
    train::load_pretrained(folder, *model);
    model->train(false);
    at::NoGradGuard no_grad;
    const at::Tensor loom = model->forward(reference[0].second);
    EXPECT_LT((loom - reference[1].second).abs().max().item<double>(), 1e-5);
  }
}

// LoRA on a Llama transformers made (model.pretrained): adapters on q, v and down, dropout on
// their input, the rest frozen. It trains like one process in a tensor group (with the sequence
// split too), under ZeRO-3 (which shards the frozen base too) and in a pipeline; its optimizer
// state is at most 2% of a full
// fine-tune's; its adapters, exported in PEFT's format, load onto transformers' model with peft to
// the logits of its merged export.
TEST_F(LanguageModelTrain, LoraFineTunesAPretrainedLlamaInEveryLayoutAndPeftLoadsIt) {
  const std::string python = torch_python();
  if (python.empty() || run_command(python + " -c 'import peft'").exit_code != 0) {
    GTEST_SKIP() << "no Python with transformers and peft (scripts/requirements.txt)";
  }
  TempDir dir;
  const std::string script = source_dir() + "/tests/unit/train/make_hf_folders.py";
  const auto made = run_command(python + " " + script + " " + (dir / "hf") + " --vocab 1000");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string base = with_model(gpt_args(), " --set model=llama") +
                           " --set model.pretrained=" + (dir / "hf/llama");
  const std::string lora =
      base +
      " --set model.lora.rank=4 --set model.lora.alpha=8 --set model.lora.dropout=0.1"
      " --set model.lora.targets=layers.*.self_attn.q_proj,layers.*.self_attn.v_proj,"
      "layers.*.mlp.down_proj";
  auto run = run_loom("train" + lora + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"tensor", " --set data.batch_size=8 --set parallel.tensor=2"},
           {"sequence",
            " --set data.batch_size=8 --set parallel.tensor=2 --set parallel.tensor_sequence=true"},
           {"zero3", " --set data.global_batch=8 --set parallel.zero=3"},
           {"pipeline", pipelined(2, 4, "1f1b")}}) {
    SCOPED_TRACE(name);
    run = run_loom(launch(2, lora + layout + " --out " + (dir / name)));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(dir / name, dir / "one");
  }
  // Between steps a ZeRO-3 rank holds half of the base (and of the adapters), padding aside.
  const auto parameter_bytes = [&](const std::string& run_dir) {
    return summary_of(run_dir)["memory"]["parameter_bytes"].get<double>();
  };
  EXPECT_LT(parameter_bytes(dir / "zero3"), 0.51 * parameter_bytes(dir / "one"));
  // Adam's two moments of every parameter, against those of the adapters alone.
  const std::string adam = " --set optimizer.name=adamw --set train.max_steps=2";
  run = run_loom("train" + base + adam + " --out " + (dir / "full"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = run_loom("train" + lora + adam + " --out " + (dir / "adam"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const double full = summary_of(dir / "full")["memory"]["optimizer_state_bytes"].get<double>();
  const double adapters = summary_of(dir / "adam")["memory"]["optimizer_state_bytes"].get<double>();
  EXPECT_GT(adapters, 0);
  EXPECT_LE(adapters, 0.02 * full) << adapters << " of " << full;

  run = run_loom("export " + (dir / "one") + " --format peft --out " + (dir / "adapter"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = run_loom("export " + (dir / "one") + " --out " + (dir / "merged_hf"));
  EXPECT_EQ(run.exit_code, 2) << run.output;  // adapters need --merge-lora or --format peft
  run = run_loom("export " + (dir / "one") + " --merge-lora --out " + (dir / "merged"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto logits =
      run_command(python + " " + script + " --peft " + (dir / "hf/llama") + " " +
                  (dir / "adapter") + " " + (dir / "merged") + " " + (dir / "peft.logits"));
  ASSERT_EQ(logits.exit_code, 0) << logits.output;
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, t] : train::read_safetensors(dir / "peft.logits")) by_name[name] = t;
  const at::Tensor adapted = by_name.at("peft"), merged = by_name.at("merged");
  EXPECT_LT((adapted - merged).abs().max().item<double>(), 1e-5);
  // The adapters learned: the merged model is not the base one.
  const models::NamedTensors trained = train::read_safetensors(dir / "merged/model.safetensors");
  const models::NamedTensors original = train::read_safetensors(dir / "hf/llama/model.safetensors");
  std::map<std::string, at::Tensor> before(original.begin(), original.end());
  int changed = 0;
  for (const auto& [name, t] : trained) changed += !at::equal(t, before.at(name));
  EXPECT_EQ(changed, 6);  // q, v and down of each of the 2 layers
}

// Fine-tuning pairs: JSON Lines of prompts and responses, tokenized with the model's tokenizer
// into shards whose loss mask leaves the prompts out (a malformed line is counted and skipped).
// The step's loss is the mean over the targets that count in the whole step, so one process,
// accumulated micro-batches, data-parallel replicas (which count different numbers of
// targets), a tensor group (the vocabulary-parallel loss) and a pipeline train alike.
TEST_F(LanguageModelTrain, PromptResponsePairsTrainOnTheResponsesAloneInEveryLayout) {
  TempDir dir;
  {
    std::ofstream pairs(dir / "pairs.jsonl");
    data::TextCorpus jargon({kJargon});
    for (int k = 0; k < 800; ++k) {
      const std::optional<std::string> paragraph = jargon.next_paragraph();
      ASSERT_TRUE(paragraph);
      const size_t cut = paragraph->find(' ', paragraph->size() / 3);
      if (cut == std::string::npos) continue;
      pairs << nlohmann::json{{"prompt", "Explain: " + paragraph->substr(0, cut)},
                              {"response", paragraph->substr(cut)}}
                   .dump()
            << "\n";
      if (k == 10) pairs << "{\"prompt\": \"no response\"}\n\n";
    }
  }
  const auto tokenized = run_loom("data tokenize " + (dir / "pairs.jsonl") + " --tokenizer " +
                                  (*data_ / "tok/tokenizer.model") + " --out " + (dir / "pairs") +
                                  " --val-fraction 0.05 --json");
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  const auto made = json_line(tokenized.output);
  EXPECT_EQ(made["pairs"], true);
  EXPECT_EQ(made["skipped_lines"], 1);
  EXPECT_GT(made["train_counted_tokens"].get<int64_t>(), made["train_tokens"].get<int64_t>() / 3);
  EXPECT_LT(made["train_counted_tokens"].get<int64_t>(), made["train_tokens"].get<int64_t>());

  std::string args = gpt_args();
  const std::string data = "data.path=" + (*data_ / "tok");
  args.replace(args.find(data), data.size(), "data.path=" + (dir / "pairs"));
  const auto one = run_loom("train" + args + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // The loss is per counted target: an untrained model's first is about ln(vocabulary) = 6.9,
  // not that times the counted share of the positions (about 0.6).
  const std::vector<nlohmann::json> steps = metrics_records(dir / "one", "step");
  ASSERT_FALSE(steps.empty());
  EXPECT_NEAR(steps.front()["loss"].get<double>(), std::log(1000.0), 0.4);
  const auto accumulated =
      run_loom("train" + args + accumulating(4, 2) + " --out " + (dir / "acc"));
  ASSERT_EQ(accumulated.exit_code, 0) << accumulated.output;
  expect_like(dir / "acc", dir / "one");
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"data", " --set data.global_batch=8"},
      {"tensor", " --set data.batch_size=8 --set parallel.tensor=2"},
      {"pipeline", pipelined(2, 4, "1f1b")}};
  for (const auto& [name, layout] : layouts) {
    SCOPED_TRACE(name);
    const auto run = run_loom(launch(2, args + layout + " --out " + (dir / name)));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(dir / name, dir / "one");
  }
}

}  // namespace
}  // namespace loom::test
