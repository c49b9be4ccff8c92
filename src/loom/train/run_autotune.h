// The autotuner inside one training run (autotune.enabled): started from the run's settings, or
// going on with the result of the checkpoint the run resumed from; stepped while it tunes; its
// choice applied to the run (loader and compute threads, with the data-parallel buckets that
// AutotuneSession sets itself) and reported: a metrics.jsonl row, the summary, autotune.yaml,
// and every later checkpoint (so that a resumed run does not tune again).
//
// Threading: the training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "loom/core/config.h"
#include "loom/profile/advisor.h"
#include "loom/train/autotune_session.h"
#include "loom/train/run_accounting.h"
#include "loom/train/run_parts.h"
#include "loom/train/trainer.h"

namespace loom::train {

class RunAutotune {
 public:
  // What of the run the autotuner reads and changes; all must outlive it.
  struct Run {
    const Config& config;
    const TrainOptions& options;
    RunParts& parts;
    RunInfo& info;
    RunAccounting& accounting;
  };
  // Tunes over at most autotune.max_share of the `steps_left` steps the run has from `step`;
  // `resumed_json` (the checkpoint `checkpoint` kept; "" if none) is a finished result to go on
  // with instead. Throws ConfigError for autotune.* out of range, DataError for a malformed
  // result.
  RunAutotune(Run run, int64_t step, int64_t steps_left, const std::string& resumed_json,
              const std::string& checkpoint);

  bool tuning() const { return session_->tuning(); }
  // After a step run while tuning(), numbered `step` (1-based), that took `seconds` for
  // `samples`.
  void after_step(int64_t step, int64_t samples, double seconds);
  // The finished result for a checkpoint; "" while tuning or where there is none.
  std::string checkpoint_json() const;
  // The summary's and the advisor's part; rank 0 (`leader`) writes autotune.yaml. Where every
  // step was tuning, the chosen settings' score stands for the run's rate.
  void fill_summary(bool leader, TrainSummary& s, profile::RunProfile& profiled) const;

 private:
  // Tuning is over: the run goes on with the chosen settings from `step`.
  void finish(int64_t step);

  Run run_;
  std::unique_ptr<AutotuneSession> session_;
};

}  // namespace loom::train
