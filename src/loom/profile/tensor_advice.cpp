#include "loom/profile/tensor_advice.h"

#include <algorithm>

#include "loom/core/text.h"
#include "loom/profile/phase_finding.h"

namespace loom::profile {
namespace {

// The smallest group that splits `heads` (0: none does).
int smallest_split(int64_t heads) {
  for (int64_t t = 2; t <= heads; ++t) {
    if (heads % t == 0) return static_cast<int>(t);
  }
  return 0;
}

std::string what_it_costs(int t) {
  return "for 2 all-reduces of a layer's activations (batch x context x n_embd values) in "
         "forward and 2 in backward over the group's " +
         std::to_string(t) + " ranks (put them on one host: they exchange over shared memory)";
}

void add_bubble_tensor(const RunProfile& run, std::vector<Finding>& out) {
  const double bubble = run.step_times.share(Phase::kBubble);
  const int t = run.pipeline_ranks;
  if (run.tensor_ranks > 1 || t < 2 || bubble < 0.20) return;
  if (run.better_microbatches > 0 && run.better_bubble < 0.10) return;  // the cheaper fix
  if (run.tensor_heads < t || run.tensor_heads % t != 0) return;
  const std::string n = std::to_string(t);
  Finding f = phase_finding(run, Phase::kBubble, "bubble_tensor", 0.30, "parallel.tensor");
  f.advice = "parallel.tensor: " + n + " in place of the pipeline's " + n +
             " stages (parallel.pipeline.stages: 1): each rank holds 1/" + n +
             " of every layer's matrices (the " + std::to_string(run.tensor_heads) +
             " heads split " + n + " ways) instead of 1/" + n +
             " of the layers, about as much memory, and waits for no neighbouring stage, " +
             what_it_costs(t);
  f.suggested = n;
  f.measured["heads"] = static_cast<double>(run.tensor_heads);
  out.push_back(f);
}

void add_tensor_comm(const RunProfile& run, std::vector<Finding>& out) {
  const double comm = run.step_times.share(Phase::kTensorComm);
  if (run.tensor_ranks <= 1 || comm < 0.10) return;
  const int t = run.tensor_ranks;
  const int fewer = t > 2 && t % 2 == 0 ? t / 2 : 1;  // what the advice suggests
  const std::string smaller =
      fewer > 1 ? "parallel.tensor: " + std::to_string(fewer) +
                      " halves the group (the freed ranks as data-parallel replicas)"
                : "parallel.tensor: 1 trains the same ranks as data-parallel replicas, where the "
                  "whole model fits a rank";
  Finding f = phase_finding(run, Phase::kTensorComm, "tensor_comm", 0.30, "parallel.tensor");
  f.advice =
      "the tensor group's collectives (2 a layer in forward and 2 in backward, over " +
      std::to_string(t) +
      " ranks: all-reduces, or all-gathers and reduce-scatters with parallel.tensor_sequence) "
      "are not hidden behind compute: " +
      smaller +
      "; or raise data.batch_size, so that each collective's fixed cost is paid for more "
      "samples";
  f.suggested = std::to_string(fewer);
  f.measured["tensor_ranks"] = t;
  out.push_back(f);
}

}  // namespace

void add_tensor_memory(const RunProfile& run, const Finding& near_cap, double model_state,
                       std::vector<Finding>& out) {
  if (run.tensor_ranks > 1 || run.peak_tensor_bytes <= 0) return;
  const int t = smallest_split(run.tensor_heads);
  if (t == 0) return;
  const double activations = std::max(0.0, run.peak_tensor_bytes - model_state);
  const double split_state = run.tensor_split_share * model_state;
  if (split_state + activations < 0.5 * run.peak_tensor_bytes) return;
  const double off = 1.0 - 1.0 / t;
  const std::string n = std::to_string(t);
  std::string advice = "parallel.tensor: " + n + " splits every layer's attention (its " +
                       std::to_string(run.tensor_heads) + " heads) and MLP over " + n +
                       " ranks: each holds 1/" + n + " of the layers' matrices, about " +
                       megabytes(off * split_state) +
                       " less of parameters, gradients and optimizer state";
  if (activations > 0) {
    advice += ", and of the activations inside attention and the MLP, up to " +
              megabytes(off * activations) + " of the " + megabytes(activations) +
              " of activations (the LayerNorms' and the residual stream's stay whole)";
  }
  advice += ", " + what_it_costs(t);
  if (run.pipeline_ranks > 1) {
    advice += "; a group of " + n + " ranks runs each of the pipeline's stages (" +
              std::to_string(t * run.pipeline_ranks) + " ranks a pipeline)";
  } else if (run.data_parallel_ranks > 1) {
    advice += "; the job's ranks then form 1/" + n + " as many data-parallel replicas";
  }
  Finding f = near_cap;
  f.id = "memory_tensor";
  f.advice = advice;
  f.key = "parallel.tensor";
  f.suggested = n;
  f.measured["heads"] = static_cast<double>(run.tensor_heads);
  f.measured["saved_state_bytes"] = off * split_state;
  f.measured["activation_bytes"] = activations;
  f.measured["saved_activation_bytes"] = off * activations;
  if (run.pipeline_ranks > 1) f.measured["ranks_a_pipeline"] = t * run.pipeline_ranks;
  out.push_back(f);
}

void add_tensor_time(const RunProfile& run, std::vector<Finding>& out) {
  add_bubble_tensor(run, out);
  add_tensor_comm(run, out);
}

}  // namespace loom::profile
