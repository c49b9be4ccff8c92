// `loom train` on token data with a GPT, as a user runs it: the Jargon File (Debian's
// jargon-text) tokenized once, then a small GPT trained in one process and in every parallel
// layout. Each layout must train like one process on the same global batch (fp32, no dropout:
// what is left to differ is where the work runs), a pipeline whose first and last stages sit on
// different ranks included: the token embedding is tied to the head there, kept on both ranks
// and its gradients summed between them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e/json_output.h"
#include "e2e/language_model_fixture.h"
#include "loom/core/durable_file.h"
#include "tools/build_paths.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {
namespace {

// fp16 runs (relative to each tensor's largest element, as expect_same_model takes it): a pipeline
// against one process 5.5e-5 apart here, fp16 against fp32 8.2e-4 (fp16's rounding). A scale
// applied and not removed (or the other way) leaves the biases, which start at 0, at their start.
constexpr double kFp16PipelineTolerance = 3e-4;
constexpr double kFp16Fp32Tolerance = 5e-3;

TEST_F(LanguageModelTrain, OneProcessLearnsAndReportsTokensPerplexityAndMfu) {
  TempDir dir;
  const auto r = run_loom("train" + gpt_args() +
                          " --set train.max_steps=40 --set train.log_every=1 --set "
                          "data.batch_size=8 --set optimizer.name=adamw --set optimizer.lr=0.003 "
                          "--out " +
                          (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = summary_of(dir / "run");
  EXPECT_EQ(s["task"], "language_model");
  EXPECT_EQ(s["tokens_per_sample"], 32);
  EXPECT_NEAR(s["tokens_per_second"].get<double>(), 32 * s["samples_per_second"].get<double>(),
              1e-6 * s["tokens_per_second"].get<double>());
  EXPECT_NEAR(s["test_perplexity"].get<double>(), std::exp(s["test_loss"].get<double>()),
              1e-9 * s["test_perplexity"].get<double>());
  // Learning: from about ln(1000) = 6.9 at the start, well down after 40 steps.
  std::ifstream metrics(dir / "run/metrics.jsonl");
  double first_loss = 0;
  bool tokens_logged = false;
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record["type"] != "step") continue;
    if (first_loss == 0) first_loss = record["loss"];
    tokens_logged = tokens_logged || record.contains("tokens_per_second");
  }
  EXPECT_GT(first_loss, 6.5);
  EXPECT_LT(s["test_loss"].get<double>(), first_loss - 0.5);
  EXPECT_TRUE(tokens_logged);
  // MFU by the transformer count: 6N + 12 L d T per token, N without the position table.
  const double n = s["parameters"].get<double>() - 32 * 64;
  const double per_token = 6 * n + 12.0 * 2 * 64 * 32;
  EXPECT_EQ(s["mfu"]["basis"], "6N + 12 L d T per token");
  EXPECT_NEAR(s["mfu"]["training_flops_per_sample"].get<double>(), 32 * per_token,
              1e-9 * 32 * per_token);
  EXPECT_GT(s["mfu"]["mfu"].get<double>(), 0);
  // The tied matrix is saved once, under its own name; there is no separate head matrix.
  const auto model = model_of(dir / "run");
  EXPECT_EQ(model.count("wte.weight"), 1u);
  EXPECT_EQ(model.at("wte.weight").sizes(), (at::IntArrayRef{1000, 64}));
  EXPECT_EQ(model.size(), 4u + 2 * 12u);  // wte, wpe, ln_f x 2, and 12 tensors a layer

  // Text from the last checkpoint: a pure function of the seed, within --tokens, and the run
  // keeps its tokenizer.
  EXPECT_TRUE(std::filesystem::exists(dir / "run/tokenizer.model"));
  const std::string generate = "generate " + (dir / "run") + " --prompt hacker --tokens 20 --json";
  const auto a = run_loom(generate + " --seed 7"), b = run_loom(generate + " --seed 7");
  const auto c = run_loom(generate + " --seed 8");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto first = json_line(a.output), again = json_line(b.output), other = json_line(c.output);
  EXPECT_EQ(first["tokens"], again["tokens"]);
  EXPECT_EQ(first["text"], again["text"]);
  EXPECT_NE(first["tokens"], other["tokens"]);
  EXPECT_GE(first["tokens"].size(), 1u);
  EXPECT_LE(first["tokens"].size(), 20u);
  EXPECT_EQ(first["checkpoint"], latest_checkpoint(dir / "run"));
  // The printed text is the prompt and the continuation decoded together.
  const std::string output = first["output"];
  EXPECT_EQ(output.rfind("hacker", 0), 0u) << output;
  EXPECT_EQ(output.substr(output.size() - first["text"].get<std::string>().size()),
            first["text"].get<std::string>());
  const auto plain =
      run_loom("generate " + (dir / "run") + " --prompt hacker --tokens 20 --seed 7");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find(output + "\n"), std::string::npos) << plain.output;
  // A copy of the run without its tokenizer, whose token folder is gone, names the folder.
  std::filesystem::create_directory(dir / "moved");
  std::filesystem::copy(dir / "run/checkpoints", dir / "moved/checkpoints",
                        std::filesystem::copy_options::recursive);
  std::string config = loom::read_file(dir / "run/config.yaml");
  const std::string tokens = *data_ / "tok";
  ASSERT_NE(config.find(tokens), std::string::npos) << config;
  config.replace(config.find(tokens), tokens.size(), dir / "gone");
  loom::replace_file_atomically(dir / "moved/config.yaml", config);
  const auto moved = run_loom("generate " + (dir / "moved") + " --tokens 5");
  EXPECT_EQ(moved.exit_code, 1) << moved.output;
  EXPECT_NE(moved.output.find("(data.path '" + (dir / "gone") + "') is missing"), std::string::npos)
      << moved.output;

  // The report speaks of tokens and perplexity (drawn by its script, read back from Chromium).
  const std::string browser = chromium();
  if (browser.empty()) return;  // scripts/install-deps.sh installs it; the Report test says so
  const auto report = run_loom("report " + (dir / "run"));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const auto dom = rendered_dom(browser, dir / "run/report.html", dir / "profile");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_NE(dom.output.find("tokens/s</b>"), std::string::npos) << dom.output.substr(0, 2000);
  EXPECT_NE(dom.output.find("validation perplexity <b>"), std::string::npos);
  EXPECT_NE(dom.output.find(">ppl "), std::string::npos);  // each validation's label
  EXPECT_NE(dom.output.find("data-charts=\"3\""), std::string::npos);
}

TEST_F(LanguageModelTrain, DataParallelTrainsLikeOneProcess) {
  TempDir dir;
  const auto one =
      run_loom("train" + gpt_args() + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two =
      run_loom(launch(2, gpt_args() + " --set data.global_batch=8 --out " + (dir / "two")));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(summary_of(dir / "two")["data_parallel"]["ranks"], 2);
  expect_like(dir / "two", dir / "one");
}

// Dropout on: a micro-batch's masks are keyed by the samples it holds and each block's by its
// index (models/draw_key.h), so data-parallel replicas, pipeline stages and recomputed blocks
// draw what one process accumulating micro-batches of the same size draws.
TEST_F(LanguageModelTrain, EveryLayoutDrawsOneProcesssDropoutMasks) {
  TempDir dir;
  const std::string args = gpt_args() + " --set model.gpt.dropout=0.1";
  const auto one = run_loom("train" + args + accumulating(4, 2) + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto off = run_loom("train" + gpt_args() + accumulating(4, 2) + " --out " + (dir / "off"));
  ASSERT_EQ(off.exit_code, 0) << off.output;
  // The masks matter: without them the run ends elsewhere.
  EXPECT_GT(std::abs(summary_of(dir / "one")["final_train_loss"].get<double>() -
                     summary_of(dir / "off")["final_train_loss"].get<double>()),
            1e-4);
  const std::vector<std::pair<std::string, std::string>> layouts = {
      {"replicas", launch(2, args + " --set data.global_batch=8")},
      {"pipeline",
       launch(2, args + pipelined(4, 2, "1f1b") + " --set train.activation_checkpointing=blocks")},
  };
  for (const auto& [name, command] : layouts) {
    SCOPED_TRACE(name);
    const auto run = run_loom(command + " --out " + (dir / name));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    expect_like(dir / name, dir / "one");
  }
}

// Token windows built by `loom data-worker` for both ranks (their shares, LZ4 on the wire): the
// run is bit-identical to one that reads the shards itself. No data.seq_len: the worker is told
// the context of the GPT preset.
TEST_F(LanguageModelTrain, TokenWindowsFromARemoteDataWorkerTrainBitIdentically) {
  TempDir dir;
  std::string args = gpt_args();
  const std::string explicit_length = " --set data.seq_len=32";
  args.replace(args.find(explicit_length), explicit_length.size(),
               " --set model.gpt.preset=gpt_tiny --set data.global_batch=8");
  const auto local = run_loom(launch(2, args + " --out " + (dir / "local")));
  ASSERT_EQ(local.exit_code, 0) << local.output;

  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  BackgroundProcess worker("env LOOM_LOG_LEVEL=info " + test::loom_binary() +
                               " data-worker --threads 1 --listen " + address + " --data-root " +
                               data_->path(),
                           dir / "worker.log");
  ASSERT_TRUE(wait_for_text(dir / "worker.log", "listening on", 30))
      << read_text(dir / "worker.log");
  const auto remote = run_loom(launch(2, args + " --out " + (dir / "remote") +
                                             " --set data.remote.workers=" + address +
                                             " --set data.remote.local_threads=0"
                                             " --set data.remote.compression=lz4"));
  ASSERT_EQ(remote.exit_code, 0) << remote.output;
  const nlohmann::json summary = summary_of(dir / "remote");
  const nlohmann::json& served = summary["data"]["remote"]["workers"];
  ASSERT_EQ(served.size(), 1u) << summary["data"];
  EXPECT_GE(served[0]["batches"].get<int>(), 8) << served;
  EXPECT_EQ(summary["data"]["remote"]["local_batches"], 0) << summary["data"];
  EXPECT_EQ(summary["tokens_per_sample"], 64) << summary;
  expect_identical_runs(dir / "local", dir / "remote");
  const std::string log = read_text(dir / "worker.log");
  EXPECT_NE(log.find("tokens data"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 1/2"), std::string::npos) << log;
}

// ZeRO-1 and ZeRO-2: each rank keeps and steps half of the optimizer state (ZeRO-2: and keeps half
// of the gradients); the model is the same.
TEST_F(LanguageModelTrain, ShardedOptimizerStateAndGradientsTrainLikeOneProcessOnHalfTheMemory) {
  TempDir dir;
  const auto one =
      run_loom("train" + gpt_args() + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto memory = [&](const std::string& run, const char* what) {
    return summary_of(dir / run)["memory"][what].get<double>();
  };
  // SGD momentum: one buffer a parameter; gradients as large as the parameters. The shards are
  // exactly half, but for each bucket's padding to an even size.
  const double state = memory("one", "optimizer_state_bytes");
  const double gradients = memory("one", "gradient_bytes");
  ASSERT_GT(gradients, 0);
  for (const std::string stage : {"1", "2"}) {
    SCOPED_TRACE("ZeRO-" + stage);
    const std::string out = "zero" + stage;
    const auto zero = run_loom(launch(2, gpt_args() +
                                             " --set data.global_batch=8"
                                             " --set parallel.zero=" +
                                             stage + " --out " + (dir / out)));
    ASSERT_EQ(zero.exit_code, 0) << zero.output;
    expect_like(dir / out, dir / "one");
    EXPECT_EQ(summary_of(dir / out)["layout"]["zero"], std::stoi(stage));
    EXPECT_GE(memory(out, "optimizer_state_bytes"), 0.5 * state);
    EXPECT_LE(memory(out, "optimizer_state_bytes"), 0.5 * state + 64);
    // ZeRO-1 keeps the full gradient buckets as well as its reduced shards; ZeRO-2 the shards.
    const double held = memory(out, "gradient_bytes");
    if (stage == "1") {
      EXPECT_GE(held, 1.5 * gradients);
    } else {
      EXPECT_LE(held, 0.5 * gradients + 64);
    }
  }
  // With AdamW, against plain data parallelism: the same mean gradients (reduce-scattered
  // instead of all-reduced), each element stepped by one rank instead of both, bit for bit.
  // (Not clipped: the norm is summed over shards, not over parameters, so it rounds apart.)
  const std::string adamw =
      " --set optimizer.name=adamw --set optimizer.lr=0.003 --set train.grad_clip=0";
  const auto plain = run_loom(
      launch(2, gpt_args() + adamw + " --set data.global_batch=8 --out " + (dir / "plain")));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto sharded = run_loom(launch(2, gpt_args() + adamw +
                                              " --set data.global_batch=8 --set parallel.zero=2"
                                              " --out " +
                                              (dir / "sharded")));
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  expect_same_model(dir / "sharded", dir / "plain", 0);
}

// A ZeRO checkpoint holds every parameter's state under its name: one process goes on from a
// ZeRO-1 job's, a ZeRO-2 job goes on from one process's, and a pipeline from a ZeRO-1 job's.
TEST_F(LanguageModelTrain, CheckpointsMoveBetweenShardedAndWholeOptimizerState) {
  TempDir dir;
  const std::string args = gpt_args() + " --set schedule.name=constant";
  const auto reference =
      run_loom("train" + args + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string zero = " --set data.global_batch=8 --set parallel.zero=1";
  const std::string a = " --out " + (dir / "a"), b = " --out " + (dir / "b");
  // Written in the background from the shards gathered at the step boundary.
  auto part =
      run_loom(launch(2, args + zero + " --set train.max_steps=4 --set checkpoint.async=true" + a));
  ASSERT_EQ(part.exit_code, 0) << part.output;
  part = run_loom("train" + args + " --set data.batch_size=8 --resume" + a);
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_EQ(summary_of(dir / "a")["resumed_from_step"], 4);
  expect_same_model(dir / "a", dir / "one", 1e-5);
  part = run_loom("train" + args + " --set data.batch_size=8 --set train.max_steps=4" + b);
  ASSERT_EQ(part.exit_code, 0) << part.output;
  part =
      run_loom(launch(2, args + " --set data.global_batch=8 --set parallel.zero=2 --resume" + b));
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_EQ(summary_of(dir / "b")["resumed_from_step"], 4);
  expect_same_model(dir / "b", dir / "one", 1e-5);
  // And on into a pipeline (GPipe, one micro-batch of the same 8 windows a step).
  const std::string c = " --out " + (dir / "c");
  part = run_loom(launch(2, args + zero + " --set train.max_steps=4" + c));
  ASSERT_EQ(part.exit_code, 0) << part.output;
  part = run_loom(launch(2, args + pipelined(8, 1, "gpipe") + " --resume" + c));
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_EQ(summary_of(dir / "c")["resumed_from_step"], 4);
  expect_same_model(dir / "c", dir / "one", 1e-5);
}

TEST_F(LanguageModelTrain, PipelinesWithTheTiedEmbeddingOnBothEndsTrainLikeOneProcess) {
  TempDir dir;
  const auto one = run_loom("train" + gpt_args() + accumulating(2, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // 1F1B: embedding + h.0 on rank 0, h.1 + head on rank 1. Interleaved: one block a stage,
  // the embedding on rank 0 and the head (stage 3) on rank 1.
  for (const std::string schedule : {"1f1b", "interleaved"}) {
    SCOPED_TRACE(schedule);
    const std::string out = dir / schedule;
    const std::string chunks = schedule == "interleaved" ? " --set parallel.pipeline.chunks=2" : "";
    const auto piped =
        run_loom(launch(2, gpt_args() + pipelined(2, 4, schedule) + chunks + " --out " + out));
    ASSERT_EQ(piped.exit_code, 0) << piped.output;
    EXPECT_EQ(summary_of(out)["pipeline"]["ranks"], 2);
    expect_like(out, dir / "one");
  }
}

// fp16 with its loss scaled, through a pipeline whose embedding is tied across its ends: the scale
// reaches the last stage's loss through the executor that sums the tied copies, an overflow on the
// last stage's rank skips step 3 on both ranks, and the run ends as one process's fp16 run with
// the same fault. Near the fp32 run too: the unscaled gradients are fp32's but for fp16's rounding
// (a scale applied and not removed, or removed and not applied, is far from it).
TEST_F(LanguageModelTrain, Fp16PipelinesWithATiedEmbeddingScaleTheirLossLikeOneProcess) {
  TempDir dir;
  const std::string fp16 = gpt_args() + " --set runtime.precision=fp16";
  const auto one = run_loom("train" + fp16 + accumulating(2, 4) + " --out " + (dir / "one"),
                            "LOOM_FAULT_OVERFLOW_RANK_AT_STEP=0:3");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto piped =
      run_loom(launch(2, fp16 + pipelined(2, 4, "1f1b") + " --out " + (dir / "piped")),
               "LOOM_FAULT_OVERFLOW_RANK_AT_STEP=1:3");
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  const auto summary = summary_of(dir / "piped");
  EXPECT_EQ(summary["precision"], "fp16");
  EXPECT_EQ(summary["loss_scale"]["skipped_steps"], 1) << summary["loss_scale"];
  EXPECT_EQ(summary["loss_scale"], summary_of(dir / "one")["loss_scale"]);
  expect_same_model(dir / "piped", dir / "one", kFp16PipelineTolerance);

  // The fp32 run without the fault skips no step: fp16's without it, against fp32's.
  const auto fp32 =
      run_loom("train" + gpt_args() + accumulating(2, 4) + " --out " + (dir / "fp32"));
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  const auto plain = run_loom("train" + fp16 + accumulating(2, 4) + " --out " + (dir / "plain"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(summary_of(dir / "plain")["loss_scale"]["skipped_steps"], 0);
  expect_same_model(dir / "plain", dir / "fp32", kFp16Fp32Tolerance);
}

// 2 pipelines x 2 stages, plain and with each stage's optimizer state (ZeRO-1) and gradients
// (ZeRO-2) sharded over its 2 replicas, the tied embedding's copies summed shard by shard.
TEST_F(LanguageModelTrain, TwoPipelinesOfTwoStagesTrainLikeOneProcess) {
  TempDir dir;
  // A constant learning rate, so that a run cut short at step 4 steps as the whole run does.
  const std::string args = gpt_args() + " --set schedule.name=constant";
  const std::string whole = args + accumulating(4, 4);
  const auto one = run_loom("train" + whole + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // The split is pinned: the planner's own split follows block timings on the host, and rank 0's
  // state is compared across runs below.
  const std::string four = args + pipelined(2, 4, "1f1b") +
                           " --set data.global_batch=16 --set parallel.pipeline.split=2,2";
  double plain_state = 0;
  for (const std::string zero : {"0", "1", "2"}) {
    SCOPED_TRACE("ZeRO " + zero);
    const std::string out = dir / ("zero" + zero);
    const auto run = run_loom(launch(4, four + " --set parallel.zero=" + zero + " --out " + out));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto s = summary_of(out);
    EXPECT_EQ(s["data_parallel"]["ranks"], 2);
    EXPECT_EQ(s["pipeline"]["ranks"], 2);
    // The mesh, outermost first: each pipeline's two ranks are neighbours.
    EXPECT_EQ(s["layout"]["mesh"], nlohmann::json({{"data", 2}, {"pipeline", 2}})) << s["layout"];
    expect_like(out, dir / "one");
    // Rank 0 (stage 0) keeps half its stage's state, within the padding of its buckets.
    const double state = s["memory"]["optimizer_state_bytes"].get<double>();
    if (zero == "0") plain_state = state;
    if (zero != "0") {
      EXPECT_GE(state, 0.5 * plain_state);
      EXPECT_LE(state, 0.5 * plain_state + 64);
    }
  }
  // A ZeRO-2 pipeline checkpoint holds every parameter's state under its name: one process goes
  // on from it.
  const std::string part = dir / "part";
  auto run =
      run_loom(launch(4, four + " --set parallel.zero=2 --set train.max_steps=4 --out " + part));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = run_loom("train" + whole + " " + kDefaultsOnly + " --resume --out " + part);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(summary_of(part)["resumed_from_step"], 4);
  expect_same_model(part, dir / "one", 1e-5);
}

TEST_F(LanguageModelTrain, SynchronousParameterServersTrainLikeOneProcess) {
  TempDir dir;
  const auto one =
      run_loom("train" + gpt_args() + " --set data.batch_size=8 --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto ps = run_loom(
      "launch --nproc-per-node 2 --servers 1 -- " + test::loom_binary() + " train" + gpt_args() +
      " --set parallel.mode=ps --set data.global_batch=8 --out " + (dir / "ps"));
  ASSERT_EQ(ps.exit_code, 0) << ps.output;
  expect_like(dir / "ps", dir / "one");
}

TEST_F(LanguageModelTrain, RecomputedBlocksTrainAsKeptOnes) {
  TempDir dir;
  const auto kept =
      run_loom("train" + gpt_args() + accumulating(2, 4) + " --out " + (dir / "kept"));
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  const auto recomputed =
      run_loom("train" + gpt_args() + accumulating(2, 4) +
               " --set train.activation_checkpointing=blocks --out " + (dir / "recomputed"));
  ASSERT_EQ(recomputed.exit_code, 0) << recomputed.output;
  expect_like(dir / "recomputed", dir / "kept");
  // In a pipeline too: every other block recomputed on each stage.
  const auto piped = run_loom(launch(2, gpt_args() + pipelined(2, 4, "1f1b") +
                                            " --set train.activation_checkpointing=every_k"
                                            " --set train.activation_checkpointing_k=2 --out " +
                                            (dir / "piped")));
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  expect_like(dir / "piped", dir / "kept");
}

// A GPT whose step needs more memory than the cap: no split of its blocks fits with the
// activations kept, so the plan recomputes some (every second block over a 10 MB cap) or all
// (over 8 MB; torch's attention, which keeps no T x T weights, fits 12 MB without recompute);
// every rank then stays within the cap, and the model trains as one process does (which needs
// more than the cap). Evaluation batches of 64 windows go through the pipeline in pieces of a
// micro-batch (8), within the cap too.
TEST_F(LanguageModelTrain, APipelineRecomputesToFitItsMemoryCap) {
  TempDir dir;
  const std::string args = gpt_args() +
                           " --set model.gpt.n_layer=4 --set data.seq_len=64"
                           " --set train.max_steps=4";
  const std::string pipe = pipelined(8, 4, "1f1b");
  const auto plan_of = [&](const std::string& cap) {
    const auto r = run_loom("pipeline plan --json" + args + pipe +
                            " --set parallel.pipeline.memory_cap_mb=" + cap);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json_line(r.output);
  };
  EXPECT_EQ(plan_of("100")["recompute_chosen"], false);
  const auto some = plan_of("10"), all = plan_of("8");
  EXPECT_EQ(some["recompute_chosen"], true);
  EXPECT_EQ(some["recompute_every_chosen"], 2);
  EXPECT_EQ(all["recompute_every_chosen"], 1);
  const auto tight = test::run_loom_reporting("pipeline plan" + args + pipe +
                                              " --set parallel.pipeline.memory_cap_mb=2");
  EXPECT_EQ(tight.result.exit_code, 2) << tight.result.output;  // not even recomputing fits
  ASSERT_FALSE(tight.error.is_null()) << tight.result.output;
  EXPECT_EQ(tight.error["fields"]["key"], "parallel.pipeline.memory_cap_mb") << tight.error.dump();
  EXPECT_EQ(tight.error["fields"]["recompute_tried"], "every_block") << tight.error.dump();

  const auto one = run_loom("train" + args + accumulating(8, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_GT(summary_of(dir / "one")["memory"]["peak_cached_bytes_in_use"].get<double>(),
            10.0 * (1 << 20));
  for (const std::string cap : {"10", "8"}) {
    SCOPED_TRACE("cap " + cap + " MB");
    const std::string out = dir / ("capped" + cap);
    const auto capped = run_loom(
        launch(2, args + pipe + " --set parallel.pipeline.memory_cap_mb=" + cap + " --out " + out));
    ASSERT_EQ(capped.exit_code, 0) << capped.output;
    EXPECT_NE(capped.output.find(cap == "10" ? "activation recompute: every 2nd block"
                                             : "activation recompute: every block"),
              std::string::npos)
        << capped.output;
    const auto s = summary_of(out);  // held: the loop below reads into it
    ASSERT_EQ(s["pipeline"]["peak_memory_mb"].size(), 2u);
    for (const auto& peak : s["pipeline"]["peak_memory_mb"]) {
      EXPECT_LE(peak.get<double>(), std::stod(cap));
    }
    expect_like(out, dir / "one");
  }
}

// Two pipelines of a GPT whose parameters, gradients and AdamW state take most of a stage's
// memory: no split fits the cap as configured, and sharding each stage's optimizer state over
// its 2 replicas (ZeRO-1) makes one fit without recompute. Every rank then stays within the cap
// (no checkpoints: rank 0 gathers the whole model to write one, beyond any stage's cap), and the
// model trains as one process does.
TEST_F(LanguageModelTrain, PipelinesShardTheirOptimizerStateToFitTheirMemoryCap) {
  TempDir dir;
  const std::string args = gpt_args() +
                           " --set model.gpt.n_layer=4 --set model.gpt.n_embd=128"
                           " --set data.seq_len=16 --set optimizer.name=adamw"
                           " --set optimizer.lr=0.003 --set train.max_steps=4"
                           " --set data.eval_batch_size=8 --set checkpoint.enabled=false";
  const std::string pipes = pipelined(2, 4, "1f1b") + " --set data.global_batch=16";
  const auto plan_of = [&](const std::string& cap) {
    const auto r = run_loom("pipeline plan --json --replicas 2" + args + pipes +
                            " --set parallel.pipeline.memory_cap_mb=" + cap);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json_line(r.output);
  };
  EXPECT_EQ(plan_of("100")["zero_chosen"], 0);
  const auto fitted = plan_of("9");
  EXPECT_EQ(fitted["zero_chosen"], 1);
  EXPECT_EQ(fitted["recompute_chosen"], false);

  const auto one = run_loom("train" + args + accumulating(4, 4) + " --out " + (dir / "one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_GT(summary_of(dir / "one")["memory"]["peak_cached_bytes_in_use"].get<double>(),
            9.0 * (1 << 20));
  const auto capped = run_loom(launch(
      4, args + pipes + " --set parallel.pipeline.memory_cap_mb=9 --out " + (dir / "capped")));
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_NE(capped.output.find("ZeRO-1 over the 2 data-parallel pipelines"), std::string::npos)
      << capped.output;
  const auto s = summary_of(dir / "capped");
  EXPECT_EQ(s["layout"]["zero"], 1);
  // The choice lives in the run's plan; the configuration it wrote is the one it read.
  const auto written = run_loom("config --json " + (dir / "capped/config.yaml"));
  ASSERT_EQ(written.exit_code, 0) << written.output;
  EXPECT_EQ(json_line(written.output)["parallel"]["zero"], 0);
  for (const auto& peak : s["pipeline"]["peak_memory_mb"]) EXPECT_LE(peak.get<double>(), 9.0);
  const auto reference = summary_of(dir / "one");
  EXPECT_NEAR(s["final_train_loss"].get<double>(), reference["final_train_loss"].get<double>(),
              1e-5 * reference["final_train_loss"].get<double>());
  EXPECT_NEAR(s["test_loss"].get<double>(), reference["test_loss"].get<double>(),
              1e-5 * reference["test_loss"].get<double>());
}

TEST_F(LanguageModelTrain, CheckpointsMoveBetweenAPipelineAndOneProcess) {
  TempDir dir;
  const std::string args = gpt_args() + " --set schedule.name=constant";
  const auto reference = run_loom("train" + args + accumulating(2, 4) +
                                  " --set train.max_steps=8 --out " + (dir / "one"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string moved = " --out " + (dir / "moved");
  auto part =
      run_loom(launch(2, args + pipelined(2, 4, "1f1b") + " --set train.max_steps=4" + moved));
  ASSERT_EQ(part.exit_code, 0) << part.output;
  part = run_loom("train" + args + accumulating(2, 4) + " --set train.max_steps=8 " +
                  kDefaultsOnly + " --resume" + moved);
  ASSERT_EQ(part.exit_code, 0) << part.output;
  EXPECT_EQ(summary_of(dir / "moved")["resumed_from_step"], 4);
  expect_same_model(dir / "moved", dir / "one", 1e-5);
}

TEST_F(LanguageModelTrain, InspectCountsTheTokensOfEachSplit) {
  const auto r = run_loom("data inspect --json" + gpt_args());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = json_line(r.output);
  EXPECT_EQ(out["vocab_size"], 1000);
  for (const char* split : {"train", "val"}) {
    SCOPED_TRACE(split);
    const auto& s = out[split];
    ASSERT_TRUE(s.is_object()) << out.dump();
    int64_t tokens = 0, windows = 0;
    for (const auto& shard : s["shards"]) {
      tokens += shard["tokens"].get<int64_t>();
      windows += (shard["tokens"].get<int64_t>() - 32) / 32;  // whatever an epoch's offset
    }
    EXPECT_EQ(s["tokens"], tokens);
    EXPECT_EQ(s["windows"], windows);
    EXPECT_GT(tokens, 0);
  }
  // The validation split is the held-out 2%.
  EXPECT_LT(out["val"]["tokens"].get<double>(), 0.05 * out["train"]["tokens"].get<double>());
}

// A copy of the tokenized Jargon File whose training shard holds 0xFFFF, outside the vocabulary
// of 1000: neither `loom train` nor `loom data inspect` may take it, and both name the shard,
// the id and the vocabulary (rather than ATen's "index out of range in self").
TEST_F(LanguageModelTrain, AShardWithAnIdOutsideTheVocabularyIsADataErrorNamingIt) {
  TempDir dir;
  std::filesystem::copy(*data_ / "tok", dir / "tok", std::filesystem::copy_options::recursive);
  const std::string shard = dir / "tok/train-00000.tokens";
  ASSERT_TRUE(std::filesystem::exists(shard));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 2 * 100);  // token 100
    f.write("\xff\xff", 2);
  }
  const std::string args = gpt_args() + " --set data.path=" + (dir / "tok");
  const auto train = run_loom_reporting("train" + args + " --out " + (dir / "run"));
  EXPECT_EQ(train.result.exit_code, 1) << train.result.output;
  ASSERT_TRUE(train.error.is_object()) << train.result.output;
  EXPECT_EQ(train.error["kind"], "data");
  EXPECT_EQ(train.error["fields"]["path"], shard);
  EXPECT_EQ(train.error["fields"]["token_id"], "65535");
  EXPECT_EQ(train.error["fields"]["vocab_size"], "1000");

  // Inspect reports the shard as bad beside the good ones, and fails with the same error.
  const auto inspect = run_loom_reporting("data inspect --json" + args);
  EXPECT_EQ(inspect.result.exit_code, 1) << inspect.result.output;
  ASSERT_TRUE(inspect.error.is_object()) << inspect.result.output;
  EXPECT_EQ(inspect.error["fields"]["path"], shard);
  EXPECT_EQ(inspect.error["fields"]["token_id"], "65535");
  EXPECT_EQ(inspect.error["fields"]["vocab_size"], "1000");
  const auto out = json_line(inspect.result.output);
  EXPECT_EQ(out["bad_total"], 1);
  EXPECT_EQ(out["train"]["bad_total"], 1);
  ASSERT_EQ(out["train"]["bad_shards"].size(), 1u) << out.dump();
  EXPECT_EQ(out["train"]["bad_shards"][0]["path"], shard);
  EXPECT_EQ(out["val"]["bad_total"], 0);
  for (const auto& good : out["val"]["shards"]) EXPECT_LT(good["max_token_id"], 1000);
}

// `loom generate` goes on past the model's context of 32, each token drawn from the last 32.
TEST_F(LanguageModelTrain, GenerateSlidesItsWindowPastTheContext) {
  TempDir dir;
  const auto r = run_loom("train" + gpt_args() + " --set train.max_steps=2 --out " + (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string generate = "generate " + (dir / "run") + " --ignore-eos --json --seed 3";
  const auto past = run_loom(generate + " --tokens 80");
  ASSERT_EQ(past.exit_code, 0) << past.output;
  EXPECT_EQ(json_line(past.output)["tokens"].size(), 80u);  // 1 + 80 ids in a context of 32
  // A prompt longer than the context keeps its last 32 tokens.
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "hacker ";
  const auto long_prompt = run_loom(generate + " --tokens 5 --prompt '" + prompt + "'");
  ASSERT_EQ(long_prompt.exit_code, 0) << long_prompt.output;
  EXPECT_EQ(json_line(long_prompt.output)["tokens"].size(), 5u);
}

TEST_F(LanguageModelTrain, ModelsAndDataOfDifferentTasksAreConfigurationErrors) {
  const auto gpt_on_images = run_loom("train --set model=gpt --set train.max_steps=1");
  EXPECT_EQ(gpt_on_images.exit_code, 2) << gpt_on_images.output;
  EXPECT_NE(gpt_on_images.output.find("model.name"), std::string::npos) << gpt_on_images.output;
  const auto cnn_on_tokens = run_loom("train" + gpt_args() + " --set model=cnn");
  EXPECT_EQ(cnn_on_tokens.exit_code, 2) << cnn_on_tokens.output;
  EXPECT_NE(cnn_on_tokens.output.find("model.name"), std::string::npos) << cnn_on_tokens.output;
  const auto zero_four = run_loom("train" + gpt_args() + " --set parallel.zero=4");
  EXPECT_EQ(zero_four.exit_code, 2) << zero_four.output;
  EXPECT_NE(zero_four.output.find("parallel.zero"), std::string::npos) << zero_four.output;
  const auto compressed =
      run_loom("train" + gpt_args() + " --set parallel.zero=1 --set parallel.compression=bf16");
  EXPECT_EQ(compressed.exit_code, 2) << compressed.output;
  EXPECT_NE(compressed.output.find("parallel.compression"), std::string::npos) << compressed.output;
  const auto odd_heads = run_loom("train" + gpt_args() + " --set model.gpt.n_head=5");
  EXPECT_EQ(odd_heads.exit_code, 2) << odd_heads.output;
  EXPECT_NE(odd_heads.output.find("model.gpt.n_embd"), std::string::npos) << odd_heads.output;
  TempDir dir;
  const auto no_shards = run_loom("train" + gpt_args() + " --set data.path=" + (dir / "nothing"));
  EXPECT_EQ(no_shards.exit_code, 1) << no_shards.output;
  EXPECT_NE(no_shards.output.find(dir / "nothing"), std::string::npos) << no_shards.output;
}

}  // namespace
}  // namespace loom::test
