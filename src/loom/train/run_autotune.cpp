#include "loom/train/run_autotune.h"

#include <algorithm>
#include <vector>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"

namespace loom::train {

RunAutotune::RunAutotune(Run run, int64_t step, int64_t steps_left, const std::string& resumed_json,
                         const std::string& checkpoint)
    : run_(run) {
  const Config& config = run_.config;
  RunParts& parts = run_.parts;
  TunedSettings start;
  start.loader_threads = parts.data.loader_threads;
  start.compute_threads = run_.info.runtime.threads;
  start.prefetch_batches = static_cast<int>(config.data.prefetch_batches);
  start.bucket_cap_mb = config.parallel.bucket_cap_mb;
  if (!resumed_json.empty()) {
    // Tuned before the resume: go on with those values rather than spend steps again.
    profile::AutotuneResult earlier;
    try {
      earlier = autotune_from_json(nlohmann::ordered_json::parse(resumed_json));
    } catch (const nlohmann::json::exception& e) {
      throw DataError("checkpoint '" + checkpoint +
                      "': its autotune result is malformed: " + e.what());
    }
    session_ = std::make_unique<AutotuneSession>(config, earlier, start, *parts.data.train,
                                                 parts.layout->grad_sync());
    finish(step);
    return;
  }
  std::vector<parallel::GradientInfo> gradients;
  for (const auto& [name, p] : parts.layout->parameters()) {
    if (p.requires_grad()) gradients.push_back({p.numel(), p.scalar_type()});
  }
  session_ = std::make_unique<AutotuneSession>(
      config, run_.options.topology.usable_cores, steps_left, start, *parts.data.train,
      parts.layout->grad_sync(), run_.options.groups.trainers, gradients);
}

void RunAutotune::after_step(int64_t step, int64_t samples, double seconds) {
  session_->after_step(samples, seconds);
  if (!session_->tuning()) finish(step);
}

void RunAutotune::finish(int64_t step) {
  const TunedSettings& chosen = session_->settings();
  run_.parts.data.loader_threads = chosen.loader_threads;
  run_.info.runtime.threads = chosen.compute_threads;
  run_.info.runtime.threads_reason =
      session_->resumed() ? "chosen by the autotuner before the resume" : "chosen by the autotuner";
  // The chosen settings may differ from the last ones tried: let them settle before measuring.
  RunAccounting& accounting = run_.accounting;
  accounting.set_warmup_steps(
      std::max(accounting.warmup_steps(), accounting.steps() + run_.config.autotune.warmup_steps));
  const profile::AutotuneResult& r = *session_->result();
  accounting.write({{"type", "autotune"},
                    {"step", step},
                    {"chosen", autotune_json(r)["chosen"]},
                    {"resumed", session_->resumed()},
                    {"samples_per_second", r.chosen_score},
                    {"start_samples_per_second", r.start_score}});
}

std::string RunAutotune::checkpoint_json() const {
  if (session_->tuning() || !session_->result()) return "";
  return autotune_json(*session_->result()).dump();
}

void RunAutotune::fill_summary(bool leader, TrainSummary& s, profile::RunProfile& profiled) const {
  const profile::AutotuneResult* r = session_->result();
  if (s.samples_per_second == 0 && r) s.samples_per_second = r->chosen_score;
  profiled.threads_tuned = r != nullptr;
  if (r) s.autotune = *r;
  s.autotune_resumed = session_->resumed();
  s.autotune_skipped = session_->skipped();
  if (leader && r) {
    replace_file_atomically(run_.options.out_dir + "/autotune.yaml",
                            autotune_yaml(*r, run_.info.machine));
  }
}

}  // namespace loom::train
