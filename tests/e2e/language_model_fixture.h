// The fixture of the tests that train a GPT with `loom train` on token data: the Jargon File
// (Debian's jargon-text) tokenized once per test process, a small GPT's arguments, and
// comparisons of a run with a reference run.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "e2e/json_output.h"
#include "e2e/same_training.h"
#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {

inline const char* kJargon = "/usr/share/doc/jargon-text/jargon.txt.gz";

class LanguageModelTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#if defined(__SANITIZE_ADDRESS__)
    skip_ = "SentencePiece needs RTLD_DEEPBIND, refused under AddressSanitizer";
    return;
#endif
    if (!std::filesystem::exists(kJargon)) {
      skip_ = std::string(kJargon) + " missing (jargon-text)";
      return;
    }
    data_ = new TempDir;
    const auto r = run_loom("data tokenize " + std::string(kJargon) + " --out " + (*data_ / "tok") +
                            " --vocab-size 1000 --val-fraction 0.02");
    if (r.exit_code != 0) skip_ = "tokenizing failed: " + r.output;
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // A GPT of two layers, 64 wide, on windows of 32 tokens; a short warm-up so that eight steps
  // move the weights; clipping, which must count the tied matrix once. SGD: Adam divides each
  // gradient by its own running size, so an element whose gradient is a rounding error away
  // from zero steps by the whole learning rate, either way, and two exact layouts that sum in
  // another order part by far more than 1e-5.
  static std::string gpt_args() {
    return " --set data=tokens --set data.path=" + (*data_ / "tok") +
           " --set model=gpt --set model.gpt.n_layer=2 --set model.gpt.n_embd=64"
           " --set model.gpt.n_head=4 --set data.seq_len=32 --set runtime.precision=fp32"
           " --set optimizer.lr=0.5 --set schedule.warmup_steps=2 --set train.grad_clip=1"
           " --set train.epochs=1 --set train.max_steps=8 --set data.eval_batch_size=64";
  }
  static std::string launch(int ranks, const std::string& args) {
    return "launch --nproc-per-node " + std::to_string(ranks) + " -- " + test::loom_binary() +
           " train" + args;
  }
  // One process reading `micro` windows a micro-batch and accumulating `m` of them per step.
  static std::string accumulating(int micro, int m) {
    return " --set data.batch_size=" + std::to_string(micro) +
           " --set train.grad_accum=" + std::to_string(m);
  }
  static std::string pipelined(int micro, int m, const std::string& schedule) {
    return " --set parallel.pipeline.stages=2 --set data.batch_size=" + std::to_string(micro * m) +
           " --set parallel.pipeline.microbatches=" + std::to_string(m) +
           " --set parallel.pipeline.schedule=" + schedule;
  }

  static void expect_like(const std::string& run, const std::string& reference) {
    expect_trained_alike(run, reference);
  }

  // A checkpoint written by one layout, resumed by another: `first` runs to step 4, `then`
  // resumes it in the same folder and must end with `reference`'s parameters (1e-5).
  static void expect_moves(const std::vector<CheckpointMove>& moves, const TempDir& dir,
                           const std::string& reference) {
    expect_checkpoint_moves(moves, dir, reference, 4);
  }

  static inline TempDir* data_ = nullptr;
  static inline std::string skip_;
};

}  // namespace loom::test
