// Reads a profiled run and says what to change: each finding names its evidence, the most it can
// gain, and the configuration key to change. Rules and thresholds follow the tools users already
// trust (TensorFlow's profiler, PyTorch's profiler plugin):
//   input_bound      data_wait >= 5% of the step (moderate), >= 20% (high); with how many
//                    remote data workers would feed the model (tf.data's autoscaling rule:
//                    N = consumption rate / one worker's throughput)
//   exposed_comm     comm_exposed >= 10%
//   pipeline_bubble  bubble >= 10% (a pipeline rank waiting for its neighbours)
//   threads          compute threads below this rank's cores (the usable cores over the ranks
//                    on the host) while the loader has little to do
//   precision        fp32 on a CPU with native bf16
//   reference_blas   fp32 matrix products on netlib's reference BLAS (Debian's default
//                    libblas.so.3 without OpenBLAS), 16-30x slower than OpenBLAS
//   memory_format    contiguous layout for a convolutional model
//   low_utilisation  process CPU use < 50% of this rank's cores with a small batch
//   memory           peak resident memory >= 90% of the machine's
//   memory_recompute, memory_zero, memory_tensor  peak tensor memory >= 80% of the cap
//                    (parallel.memory_cap_mb, a pipeline's parallel.pipeline.memory_cap_mb), or
//                    resident memory >= 80% of the machine's: what activation recompute, the ZeRO
//                    stages above the run's (3 only without pipeline stages) and tensor
//                    parallelism would each save, where they are not on (profile/memory_advice.h,
//                    profile/tensor_advice.h)
//   bubble_tensor    bubble >= 20% that more micro-batches would not bring under 10%: a tensor
//                    group in place of the pipeline's stages (profile/tensor_advice.h)
//   tensor_comm      tensor_comm >= 10% under parallel.tensor (profile/tensor_advice.h)
//   unsteady_throughput  the steady steps' time spread: p90 step time >= 1.5x the p10
//                    (moderate), >= 3x (high), over >= 20 steps. Loom's benchmarks vary
//                    10-20% between runs on a busy host (bench/RESULTS.md): 1.5x is far past
//                    that noise, and 3x is the swing of a host whose other load comes and goes
//                    (the run that asked for this finding swung 8x). The cause named: data
//                    waits that grow with the step (the input), other processes on this
//                    process's cores or a hypervisor's steal (a shared host), or else what to
//                    check
//   precision, memory_format, low_mfu, device_memory, host_sync  on a GPU, in place of the
//                    CPU's rules (threads, reference_blas, precision, memory_format,
//                    low_utilisation): profile/gpu_advice.h
//   overfitting      the validation loss rose at each of the last kOverfitRises evaluations
//                    while the train loss fell: names the best evaluation's step (Finding::step)
//                    and checkpoint.keep_best, which keeps its checkpoint
// A script's run (loom.profile.Steps) is told the Python call where a key does not reach it
// (loom.runtime.configure, loom.pipeline.Pipeline's arguments); `key` stays the configuration key.
// Removing a share x of the step time speeds it up at most 1 / (1 - x): that bound is the
// "max gain" of the time-based findings.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/profile/host_syncs.h"
#include "loom/profile/step_timer.h"

namespace loom::profile {

// One evaluation of the run: its step, the train loss of the epoch it closed (the mean over its
// steps) and the validation (test split) loss.
struct Evaluation {
  int64_t step = 0;
  double train_loss = 0;
  double eval_loss = 0;
};

struct RunProfile {
  StepTimes step_times;  // summed over the steady-state steps
  int64_t steps = 0;
  // step_times are on the device's clock (a GPU's: profile/device_step_timer.h), where the
  // time-based findings belong: the host only queues a GPU's work.
  bool device_clock = false;
  // The host's cores this process may use (affinity, quota), and the job's ranks whose processes
  // share them: every rank on this host, parameter servers included (1 alone). A rank's share
  // is usable_cores / ranks_on_host.
  int usable_cores = 1;
  int ranks_on_host = 1;
  // A script's loop (loom.profile.Steps) rather than `loom train`: advice names the Python call
  // where the script does not read the configuration key.
  bool python = false;
  int compute_threads = 1;
  int loader_threads = 1;
  bool loader_decodes = false;  // encoded images (the loader does real work per sample)
  std::string precision;        // fp32 | bf16
  // The compute device has native bf16: the CPU AVX-512 BF16 or AMX, a GPU bf16 tensor cores.
  bool native_bf16 = false;
  // Where the model computed: "cpu", or a GPU ("cuda:0"), where the GPU's rules apply in place
  // of the CPU's (gpu_advice.h). Model FLOP utilisation against the peak calibrated on the
  // device (0: not measured), and a GPU's caching allocator's peak reservation against its
  // memory (0: not known).
  std::string device = "cpu";
  double mfu = 0;
  double device_peak_reserved_bytes = 0;
  double device_memory_bytes = 0;
  bool on_gpu() const { return device.rfind("cuda", 0) == 0; }
  // A GPU's host synchronisations over its first steady steps (steps 0: not counted).
  HostSyncs host_syncs;
  // The BLAS fp32 matrix products ran on (BlasLibrary::name), the file, and their measured rate.
  std::string blas;
  std::string blas_path;
  double fp32_matmul_flops_per_second = 0;
  std::string memory_format;  // contiguous | channels_last
  bool convolutional = false;
  int64_t batch_size = 0;
  double cpu_utilisation = 0;  // process CPU seconds / (wall seconds x this rank's cores), 0..1
  double memory_fraction = 0;  // peak resident memory / physical memory
  bool threads_tuned = false;  // the autotuner measured loader and compute threads: keep them
  // The steady steps one by one (StepSeries: all, or a uniform sample of a long run): wall
  // seconds, and data_wait seconds of the same steps (empty: not recorded).
  std::vector<double> step_seconds;
  std::vector<double> step_data_wait_seconds;
  // Others on this process's cores over the run (HostLoad), in cores busy on average: other
  // processes' CPU time (the job's other ranks on the host included; -1: not measured) and a
  // hypervisor's steal.
  double other_cores = -1;
  double stolen_cores = 0;
  // A pipeline: its ranks (0 when none), micro-batches per step, and the count its plan
  // simulated with a smaller bubble (0 when none), with that bubble.
  // Input supply. The rate the run reached; what building a sample cost this host's loader
  // (CPU seconds); and, with data.remote.workers, how many delivered batches and the rate at
  // which one of them delivered samples while it was up.
  double samples_per_second = 0;
  double loader_cpu_seconds_per_sample = 0;
  int remote_workers = 0;
  double remote_worker_samples_per_second = 0;
  // Data parallelism: every worker's compute seconds (forward, backward, optimizer) over the
  // steady steps, by rank (empty with one); every step waits for the slowest.
  std::vector<double> worker_compute_seconds;
  // Parameter servers: each server's busy (CPU) seconds over the run (empty without servers).
  std::vector<double> server_busy_seconds;
  // Memory: the caching allocator's peak of tensor bytes in use (0 without it), the per-rank
  // cap (parallel.memory_cap_mb, or parallel.pipeline.memory_cap_mb with pipeline stages; 0:
  // none), this rank's optimizer state (its shard under ZeRO), the bytes of the parameters it
  // trains (whole, also under ZeRO-3; as much again of gradients), whether recompute is on, the
  // ZeRO stage (0: none), and the data-parallel ranks the model's state could be sharded over
  // (1: none).
  double peak_tensor_bytes = 0;
  double memory_cap_bytes = 0;
  double optimizer_state_bytes = 0;
  double parameter_bytes = 0;
  // What this rank would hold of the parameters, gradients and optimizer state at the step's
  // peak under ZeRO stage 0, 1, 2 and 3 (parallel/model_state.h's formula); empty: not known.
  std::vector<double> model_state_bytes;
  bool recompute = false;
  int zero_stage = 0;
  // Gradients accumulate over several micro-batches a step (train.grad_accum, a pipeline): the
  // full buckets then live through the step, and ZeRO-2 saves nothing more at the peak.
  bool accumulates_gradients = false;
  int data_parallel_ranks = 1;
  int pipeline_ranks = 0;
  int64_t pipeline_microbatches = 0;
  int64_t better_microbatches = 0;
  double better_bubble = 0;
  // Tensor parallelism: the ranks of this rank's tensor group (1: none); the heads a group could
  // split the model's attention by (what its tensor plan's sizes must divide: the GPT's n_head,
  // the ViT's 3; 0 where the model has no plan or the layout cannot take parallel.tensor); and the
  // share of the parameters a group would split (the layers' attention and MLP matrices), 0..1.
  int tensor_ranks = 1;
  int64_t tensor_heads = 0;
  double tensor_split_share = 0;
  // The evaluations this process ran, oldest first (a resumed run's since its resume), and the
  // checkpoint checkpoint.keep_best kept (a resumed run's may be from before its resume): its
  // step, the metric it was ranked by and its value there ("" and -1: none kept).
  std::vector<Evaluation> evaluations;
  std::string best_checkpoint;
  int64_t best_checkpoint_step = -1;
  std::string best_checkpoint_metric;
  double best_checkpoint_value = 0;
};

struct Finding {
  Finding() = default;
  // What every finding states; suggested, measured and step are set after, where they apply.
  Finding(std::string id, std::string severity, std::string evidence, std::string advice,
          std::string key = {}, double max_gain = 0)
      : id(std::move(id)),
        severity(std::move(severity)),
        evidence(std::move(evidence)),
        advice(std::move(advice)),
        key(std::move(key)),
        max_gain(max_gain) {}

  std::string id;        // input_bound, threads, ...
  std::string severity;  // high | moderate
  std::string evidence;  // what was measured
  std::string advice;    // what to change, naming the key
  std::string key;       // the configuration key ("" when none)
  // The most the step could speed up (x), 0 when not time-based; unsteady_throughput's is every
  // step as fast as the fastest tenth (mean / p10).
  double max_gain = 0;
  // The step the finding points at, -1 when none: overfitting's best evaluation.
  int64_t step = -1;
  // The value the advice gives `key` ("2", "bf16", "channels_last", "test_loss"), as a
  // configuration would write it; "" where it names none (raise, lower, look for).
  std::string suggested;
  // The numbers the evidence and advice state, by name, in base units (seconds, bytes, shares of
  // 1, counts): what a program reads instead of the sentences ("share": 0.5, "saved_bytes": ...).
  std::map<std::string, double> measured;
};

std::vector<Finding> advise(const RunProfile& run);

}  // namespace loom::profile
