#include "loom/profile/memory_advice.h"

#include <algorithm>
#include <map>
#include <string>

#include "loom/core/text.h"
#include "loom/profile/tensor_advice.h"

namespace loom::profile {
namespace {

// A pipeline's stages have their own cap (parallel.memory_cap_mb is a configuration error there).
const char* cap_key(const RunProfile& run) {
  return run.pipeline_ranks > 0 ? "parallel.pipeline.memory_cap_mb" : "parallel.memory_cap_mb";
}

bool has_model_state(const RunProfile& run, int stage) {
  return stage >= 0 && static_cast<size_t>(stage) < run.model_state_bytes.size();
}

// What this rank holds of the parameters, their gradients and the optimizer state at the step's
// peak: by parallel/model_state.h's formula where the run gave it, else the parameters, as much
// again of gradients, and the state.
double model_state_now(const RunProfile& run) {
  if (has_model_state(run, run.zero_stage)) return run.model_state_bytes[run.zero_stage];
  return 2 * run.parameter_bytes + run.optimizer_state_bytes;
}

// What the ZeRO stages above the run's would shard, each clause adding to the one before it;
// "" when none would (one data-parallel rank, or the stage already the highest that helps).
// ZeRO-1 shards the optimizer state; ZeRO-2 the gradients too, which saves nothing more at the
// peak where micro-batches accumulate (grad_accum, a pipeline: the full buckets live through the
// step); ZeRO-3 the parameters too, not with pipeline stages. `first` is the lowest stage the
// advice names.
// Each stage's saving goes into `measured` as zero<N>_saved_bytes, a rank's whole model state at
// ZeRO-3 and now as zero3_model_state_bytes and model_state_bytes.
std::string zero_advice(const RunProfile& run, int& first,
                        std::map<std::string, double>& measured) {
  if (run.data_parallel_ranks <= 1) return "";
  const int stage = run.zero_stage;
  const double ranks = static_cast<double>(run.data_parallel_ranks);
  const std::string n = std::to_string(run.data_parallel_ranks);
  const double sharded = 1.0 - 1.0 / ranks;  // of what a stage shards, the share a rank drops
  const double p = run.parameter_bytes;
  const bool zero2_helps = !run.accumulates_gradients;
  const bool zero3_allowed = run.pipeline_ranks == 0;
  std::string advice;
  if (stage == 0 && run.optimizer_state_bytes > 0) {
    first = 1;
    advice = "parallel.zero: 1 shards the " + megabytes(run.optimizer_state_bytes) +
             " of optimizer state over the " + n + " ranks: about " +
             megabytes(run.optimizer_state_bytes * sharded) + " less on each";
    measured["zero1_saved_bytes"] = run.optimizer_state_bytes * sharded;
  }
  if (stage < 2 && zero2_helps && (stage == 1 || !advice.empty())) {
    if (advice.empty()) first = 2;
    // ZeRO-1 holds the whole gradient buckets and its reduced shard; ZeRO-2 only the shard.
    measured["zero2_saved_bytes"] = stage == 0 ? p * sharded : p;
    advice += stage == 0 ? "; parallel.zero: 2 also the " + megabytes(p) + " of gradients: about " +
                               megabytes(p * sharded) + " more"
                         : "parallel.zero: 2 also frees the whole " + megabytes(p) +
                               " of gradient buckets ZeRO-1 keeps beside its shard: about " +
                               megabytes(p) + " less on each of the " + n + " ranks";
  }
  if (stage < 3 && zero3_allowed && p > 0) {
    if (advice.empty()) first = 3;
    measured["zero3_saved_bytes"] = p * sharded;
    advice += advice.empty() ? "parallel.zero: 3" + std::string(stage > 0 ? " also" : "") +
                                   " shards the " + megabytes(p) + " of parameters: about " +
                                   megabytes(p * sharded) + " less on each of the " + n + " ranks"
                             : "; parallel.zero: 3 also the " + megabytes(p) +
                                   " of parameters: about " + megabytes(p * sharded) + " more";
    if (has_model_state(run, stage) && has_model_state(run, 3)) {
      measured["model_state_bytes"] = run.model_state_bytes[stage];
      measured["zero3_model_state_bytes"] = run.model_state_bytes[3];
      advice += " (" + megabytes(run.model_state_bytes[stage] - run.model_state_bytes[3]) +
                " less a rank in all: " + megabytes(run.model_state_bytes[3]) +
                " of parameters, gradients and optimizer state instead of " +
                megabytes(run.model_state_bytes[stage]) + ")";
    }
    advice +=
        ", for about 1.5x the bytes exchanged a step (the parameters gathered in forward "
        "and again in backward)";
  }
  return advice;
}

}  // namespace

// Activations are what the peak holds beyond the parameters, their gradients and the optimizer
// state; recompute keeps about a quarter of them (bench/RESULTS.md: 23.7% of a GPT step's at
// 1.32x the step time).
void add_memory_savings(const RunProfile& run, std::vector<Finding>& out) {
  const bool near_cap =
      (run.memory_cap_bytes > 0 && run.peak_tensor_bytes >= 0.8 * run.memory_cap_bytes) ||
      run.memory_fraction >= 0.8;
  if (!near_cap || run.peak_tensor_bytes <= 0) return;
  // What every memory finding says of the peak; each adds its advice and what it would save.
  Finding peak;
  peak.severity = "moderate";
  peak.measured["peak_tensor_bytes"] = run.peak_tensor_bytes;
  if (run.memory_cap_bytes > 0) {
    peak.evidence = "peak tensor memory " + megabytes(run.peak_tensor_bytes) + " is " +
                    percent(run.peak_tensor_bytes / run.memory_cap_bytes) + " of the " +
                    megabytes(run.memory_cap_bytes) + " cap (" + cap_key(run) + ")";
    peak.measured["cap_bytes"] = run.memory_cap_bytes;
    peak.measured["cap_share"] = run.peak_tensor_bytes / run.memory_cap_bytes;
  } else {
    peak.evidence =
        "peak resident memory was " + percent(run.memory_fraction) + " of the machine's";
    peak.measured["memory_share"] = run.memory_fraction;
  }
  const double activations = std::max(0.0, run.peak_tensor_bytes - model_state_now(run));
  if (!run.recompute && activations > 0) {
    Finding f = peak;
    f.id = "memory_recompute";
    f.advice = "train.activation_checkpointing: blocks recomputes activations in backward: about " +
               megabytes(0.75 * activations) + " of the " + megabytes(activations) +
               " they take, for about 1.3x the step time";
    f.key = "train.activation_checkpointing";
    f.suggested = "blocks";
    f.measured["activation_bytes"] = activations;
    f.measured["saved_bytes"] = 0.75 * activations;
    out.push_back(f);
  }
  int stage = 0;
  Finding zero = peak;
  zero.advice = zero_advice(run, stage, zero.measured);
  if (!zero.advice.empty()) {
    zero.id = "memory_zero";
    zero.key = "parallel.zero";
    zero.suggested = std::to_string(stage);
    out.push_back(zero);
  }
  add_tensor_memory(run, peak, model_state_now(run), out);
}

}  // namespace loom::profile
