#include "loom/profile/gpu_advice.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/text.h"

namespace loom::profile {
namespace {

constexpr double kLowMfu = 0.25, kVeryLowMfu = 0.10;
constexpr double kInputShare = 0.20;    // input_bound's high threshold
constexpr int64_t kSmallGpuBatch = 32;  // samples a micro-batch
constexpr double kDeviceMemoryShare = 0.90;
// Host synchronisations a step (beyond fp16's one): a moderate finding from one, high from four.
constexpr double kHostSyncsPerStep = 1.0, kManyHostSyncsPerStep = 4.0;

// In a script: torch's autocast, which is what Loom's bf16 is (fp32 weights).
std::string gpu_bf16_setting(const RunProfile& run) {
  return run.python ? "torch.autocast(\"cuda\", dtype=torch.bfloat16)"
                    : "runtime.precision: auto or bf16";
}

void add_precision(const RunProfile& run, std::vector<Finding>& out) {
  if (run.precision == "bf16" || !run.native_bf16) return;
  const bool fp32 = run.precision == "fp32";
  // fp16 is as fast on such tensor cores, but needs the loss scaled and skips the steps whose
  // gradients overflow: bf16 has fp32's range.
  Finding f{"precision",
            fp32 ? "high" : "low",
            fp32 ? "the run computed in fp32 on " + run.device +
                       ", whose tensor cores compute bf16 at many times fp32's rate"
                 : "the run computed in fp16 with its loss scaled on " + run.device +
                       ", whose tensor cores compute bf16 as fast",
            "compute in bf16 (" + gpu_bf16_setting(run) + "; autocast keeps fp32 weights)" +
                (fp32 ? "" : ", which has fp32's range: no loss scale, no skipped steps"),
            "runtime.precision",
            0};
  f.suggested = "bf16";
  out.push_back(f);
}

void add_memory_format(const RunProfile& run, std::vector<Finding>& out) {
  if (!run.convolutional || run.memory_format != "contiguous") return;
  Finding f{"memory_format",
            "moderate",
            "a convolutional model ran in the contiguous (NCHW) layout on " + run.device,
            std::string(run.python ? "put the model and its batches in channels_last "
                                     "(model.to(memory_format=torch.channels_last))"
                                   : "set runtime.memory_format to auto or channels_last") +
                ", which cuDNN's convolutions run fastest in",
            "runtime.memory_format",
            0};
  f.suggested = "channels_last";
  out.push_back(f);
}

void add_low_mfu(const RunProfile& run, std::vector<Finding>& out) {
  if (run.mfu <= 0 || run.mfu >= kLowMfu) return;
  const double waiting = run.step_times.share(Phase::kDataWait);
  Finding f{"low_mfu",
            run.mfu < kVeryLowMfu ? "high" : "moderate",
            "the model used " + percent(run.mfu) + " of " + run.device +
                "'s peak (calibrated with a matrix product in the run's precision)",
            "",
            "",
            0};
  if (run.precision == "fp32" && run.native_bf16) {
    f.advice = "the likely cause is fp32 (the precision finding): compute in bf16 (" +
               gpu_bf16_setting(run) + ")";
    f.key = "runtime.precision";
    f.suggested = "bf16";
  } else if (waiting >= kInputShare) {
    f.advice = "the likely cause is the input: " +
               std::string(run.device_clock ? "the GPU sat idle for data for "
                                            : "the step waited for data for ") +
               percent(waiting) +
               " of the step (the input_bound finding says what feeds it faster)";
    f.key = "data.workers";
  } else if (run.batch_size < kSmallGpuBatch) {
    f.advice = "the likely cause is the micro-batch of " + std::to_string(run.batch_size) +
               " samples, small for a GPU: raise " +
               std::string(run.python ? "the batch size" : "data.batch_size") +
               " (or train.grad_accum's micro-batches' size) so each kernel has more to do";
    f.key = "data.batch_size";
  } else {
    f.advice =
        "the step is likely made of many small kernels, each waiting on its launch from "
        "the host: a larger batch gives each more work (CUDA graphs, which launch a "
        "step's kernels at once, are not in Loom yet)";
    f.key = "data.batch_size";
  }
  f.measured = {{"mfu", run.mfu}, {"batch_size", static_cast<double>(run.batch_size)}};
  out.push_back(f);
}

void add_device_memory(const RunProfile& run, std::vector<Finding>& out) {
  if (run.device_memory_bytes <= 0) return;
  const double share = run.device_peak_reserved_bytes / run.device_memory_bytes;
  if (share < kDeviceMemoryShare) return;
  Finding f{
      "device_memory",
      "high",
      "the caching allocator reserved up to " + percent(share) + " of " + run.device + "'s memory",
      "",
      "",
      0};
  if (!run.recompute) {
    f.advice =
        "recompute activations in backward (train.activation_checkpointing) or lower "
        "data.batch_size before an allocation runs out";
    f.key = "train.activation_checkpointing";
  } else {
    f.advice =
        "lower data.batch_size (and raise train.grad_accum to keep the batch) before an "
        "allocation runs out";
    f.key = "data.batch_size";
  }
  f.measured = {{"device_memory_share", share},
                {"device_peak_reserved_bytes", run.device_peak_reserved_bytes},
                {"device_memory_bytes", run.device_memory_bytes}};
  out.push_back(f);
}

// Where a step's host synchronisations were, most first: "backward 3, forward 1".
std::string phases_of(const HostSyncs& syncs) {
  std::vector<std::pair<double, Phase>> phases;
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    if (syncs.by_phase[i] > 0) phases.emplace_back(syncs.per_step(phase), phase);
  }
  std::stable_sort(phases.begin(), phases.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text;
  for (const auto& [count, phase] : phases) {
    text +=
        (text.empty() ? "" : ", ") + std::string(phase_name(phase)) + " " + format_number(count);
  }
  return text;
}

void add_host_sync(const RunProfile& run, std::vector<Finding>& out) {
  const HostSyncs& syncs = run.host_syncs;
  if (syncs.steps == 0) return;
  // Under fp16 the loss scaler reads its overflow flag once a step: the price of skipping the
  // steps that overflow, not something to find.
  const bool fp16 = run.precision == "fp16";
  const double found = syncs.per_step() - (fp16 ? 1.0 : 0.0);
  if (found < kHostSyncsPerStep) return;
  Finding f{"host_sync", found >= kManyHostSyncsPerStep ? "high" : "moderate",
            "the host waited for " + run.device + " " + format_number(syncs.per_step()) +
                " times a step (" + phases_of(syncs) +
                (fp16 ? "; one is fp16's loss-scale check" : "") +
                "): each wait drains the GPU's queue, which then idles while the host queues more",
            // Scripts' steps are not counted (loom.profile.Steps leaves the device to the script):
            // the advice is `loom train`'s, Loom's own known waits first, then a model's.
            "Loom itself waits where ranks that share a GPU exchange gradients, ZeRO shards, a "
            "tensor group's sums or a pipeline's messages through host memory (comm.backend "
            "cuda:host; on GPUs of their own NCCL does not wait), and where parameter-server "
            "workers push and pull; anything else is the model's own (a TorchScript model's "
            ".item(), nonzero or boolean-mask indexing). Waits inside backward count as backward, "
            "whichever of its phases made them",
            "", 0};
  f.measured = {{"syncs_per_step", syncs.per_step()},
                {"counted_steps", static_cast<double>(syncs.steps)}};
  for (size_t i = 0; i < kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    if (syncs.by_phase[i] > 0) {
      f.measured[std::string(phase_name(phase)) + "_syncs_per_step"] = syncs.per_step(phase);
    }
  }
  out.push_back(f);
}

}  // namespace

void add_gpu_findings(const RunProfile& run, std::vector<Finding>& out) {
  if (!run.on_gpu()) return;
  add_precision(run, out);
  add_memory_format(run, out);
  add_low_mfu(run, out);
  add_device_memory(run, out);
  add_host_sync(run, out);
}

}  // namespace loom::profile
