#include "loom/train/start_notices.h"

#include <string>

namespace loom::train {
namespace {

std::string text(int64_t n) { return std::to_string(n); }

// data.batch_size is one replica's: with D replicas and no data.global_batch, the same file
// trains on D times the samples a step, and so takes 1/D of the steps, that it would on one
// process (whose warm-up, schedule and learning rate were tuned for the smaller batch).
void batch_multiplied(const Config& config, const parallel::LayoutPlan& plan,
                      std::vector<profile::Finding>& out) {
  const int replicas = plan.data.replicas;
  if (config.data.global_batch > 0 || replicas < 2) return;
  const int64_t one_process = plan.step.replica_batch;
  profile::Finding f;
  f.id = "batch_per_replica";
  f.severity = "moderate";
  f.key = "data.global_batch";
  f.evidence = "data.batch_size " + text(config.data.batch_size) +
               " is per replica: " + text(replicas) + " replicas train on " +
               text(plan.step.global_batch) +
               " samples a step, where this file trains one process on " + text(one_process);
  f.advice = "set data.global_batch: " + text(one_process) +
             " to keep one process's batch (and its number of steps), or optimizer.lr_scaling: "
             "linear to scale the learning rate with it";
  out.push_back(f);
}

void warmup_longer_than_run(const Config& config, int64_t total_steps,
                            std::vector<profile::Finding>& out) {
  const int64_t warmup = config.schedule.warmup_steps;
  if (warmup <= 0 || warmup < total_steps) return;
  profile::Finding f;
  f.id = "warmup_exceeds_run";
  f.severity = "high";
  f.key = "schedule.warmup_steps";
  f.evidence = "schedule.warmup_steps " + text(warmup) + " is not shorter than the run's " +
               text(total_steps) + " steps: the learning rate never reaches optimizer.lr";
  f.advice = "set schedule.warmup_steps below " + text(total_steps) +
             " (a few percent of the run is usual)";
  out.push_back(f);
}

}  // namespace

std::vector<profile::Finding> start_notices(const Config& config, const parallel::LayoutPlan& plan,
                                            int64_t total_steps) {
  std::vector<profile::Finding> out;
  batch_multiplied(config, plan, out);
  warmup_longer_than_run(config, total_steps, out);
  return out;
}

}  // namespace loom::train
