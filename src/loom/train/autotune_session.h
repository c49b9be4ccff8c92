// The autotuner inside a training run (`loom train --autotune`): chooses what to try for this
// run and machine, applies each setting the autotuner asks for to the running job (loader
// threads and prefetch depth, compute threads, data-parallel bucket size), and writes the result.
//
// On a CPU machine loader and compute threads share the cores, so they are tuned against each
// other. Data-parallel ranks must change settings at the same step (bucket sizes change the
// collectives): every rank feeds the autotuner rank 0's step times, so all decide the same.
//
// Threading: the training thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/core/config.h"
#include "loom/data/batch_source.h"
#include "loom/parallel/grad_sync.h"
#include "loom/profile/autotuner.h"

namespace loom::train {

// The settings being tuned, as the job runs with them.
struct TunedSettings {
  int loader_threads = 1;
  int compute_threads = 1;
  int prefetch_batches = 1;
  double bucket_cap_mb = 0;  // data parallel only
};

class AutotuneSession {
 public:
  // `start`: the run's settings now. `steps` the run still has: tuning takes at most
  // autotune.max_share of them. Bucket sizes are tuned where `grad_sync` has buckets;
  // `gradients` are its trainable parameters, to pick sizes that make a difference. With several
  // ranks, `communicator` shares rank 0's step times so that all decide alike (null: one process).
  // Throws ConfigError for autotune.* values out of range.
  AutotuneSession(const Config& config, int usable_cores, int64_t steps, const TunedSettings& start,
                  data::BatchSource& loader, parallel::GradSync& grad_sync,
                  comm::Communicator* communicator,
                  const std::vector<parallel::GradientInfo>& gradients);
  // A resumed run whose checkpoint holds a finished result (`earlier`): applies its chosen
  // values to the running job and tunes nothing. Keys this run does not tune (a bucket cap
  // after resuming a data-parallel run in one process) are left out.
  AutotuneSession(const Config& config, const profile::AutotuneResult& earlier,
                  const TunedSettings& start, data::BatchSource& loader,
                  parallel::GradSync& grad_sync);

  bool tuning() const { return tuner_ && !tuner_->done(); }
  // The result came from the checkpoint the run resumed from.
  bool resumed() const { return earlier_.has_value(); }
  // After each step while tuning(): records the step and applies any new settings.
  void after_step(int64_t samples, double seconds);
  const TunedSettings& settings() const { return settings_; }
  // Null when the run was too short to measure even the starting settings.
  const profile::AutotuneResult* result() const {
    return tuner_ ? &tuner_->result() : earlier_ ? &*earlier_ : nullptr;
  }
  // Why there is no result ("" when there is one).
  const std::string& skipped() const { return skipped_; }

 private:
  void apply(const std::vector<double>& values);

  data::BatchSource& loader_;
  parallel::GradSync& grad_sync_;
  const bool tune_buckets_;
  comm::Communicator* communicator_ = nullptr;
  double first_bucket_mb_ = 0;
  std::unique_ptr<profile::Autotuner> tuner_;
  std::optional<profile::AutotuneResult> earlier_;  // resumed: the checkpoint's result
  TunedSettings settings_;
  std::string skipped_;
};

// The result for summary.json and checkpoints: starting and chosen values by key, scores, every
// trial.
nlohmann::ordered_json autotune_json(const profile::AutotuneResult& result);
// Its inverse, for the result a checkpoint kept. Throws nlohmann::json::exception for a
// malformed one (the caller names the file).
profile::AutotuneResult autotune_from_json(const nlohmann::ordered_json& json);
// The chosen values as a configuration file (nested YAML keys), with a comment saying where they
// came from; `loom train` reads it like any config.
std::string autotune_yaml(const profile::AutotuneResult& result, const std::string& machine);

}  // namespace loom::train
