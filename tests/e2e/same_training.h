// Runs that must train alike: a layout against one process on the same global batch, and a
// checkpoint written in one layout and resumed in another against a reference run. The e2e
// tests of every layout that holds tensors split or sharded (tensor parallelism, ZeRO) compare
// their runs the same way.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {

// The same steps, final training and test losses (relative error 1e-5) and parameters (1e-5)
// as `reference`, from the runs' summary.json and last checkpoint.
inline void expect_trained_alike(const std::string& run, const std::string& reference) {
  const auto a = summary_of(run), b = summary_of(reference);
  EXPECT_EQ(a["steps"], b["steps"]);
  EXPECT_NEAR(a["final_train_loss"].get<double>(), b["final_train_loss"].get<double>(),
              1e-5 * b["final_train_loss"].get<double>());
  EXPECT_NEAR(a["test_loss"].get<double>(), b["test_loss"].get<double>(),
              1e-5 * b["test_loss"].get<double>());
  expect_same_model(run, reference, 1e-5);
}

// `first` (a `loom` command line without --out) runs to step `resumed_at`; `then` resumes it in
// the same folder.
struct CheckpointMove {
  std::string name, first, then;
};

// Each move in its own folder under `dir`: both runs succeed, the second resumes at step
// `resumed_at`, and ends with `reference`'s parameters (relative error 1e-5).
inline void expect_checkpoint_moves(const std::vector<CheckpointMove>& moves, const TempDir& dir,
                                    const std::string& reference, int resumed_at) {
  int n = 0;
  for (const CheckpointMove& move : moves) {
    SCOPED_TRACE(move.name);
    const std::string folder = dir / ("move" + std::to_string(n++));
    auto run = run_loom(move.first + " --out " + folder);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    run = run_loom(move.then + " " + kDefaultsOnly + " --resume --out " + folder);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(summary_of(folder)["resumed_from_step"], resumed_at);
    expect_same_model(folder, reference, 1e-5);
  }
}

}  // namespace loom::test
