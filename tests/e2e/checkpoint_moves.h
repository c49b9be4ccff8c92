// A checkpoint written in one layout and resumed in another must end as a reference run ends:
// the e2e tests of every layout that holds tensors split or sharded (tensor parallelism, ZeRO)
// move their checkpoints the same way.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/run_compare.h"
#include "tools/test_support.h"

namespace loom::test {

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
    run = run_loom(move.then + " --resume --out " + folder);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(summary_of(folder)["resumed_from_step"], resumed_at);
    expect_same_model(folder, reference, 1e-5);
  }
}

}  // namespace loom::test
