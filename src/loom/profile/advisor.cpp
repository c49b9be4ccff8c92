#include "loom/profile/advisor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loom/core/blas_library.h"
#include "loom/core/text.h"
#include "loom/profile/gpu_advice.h"
#include "loom/profile/memory_advice.h"
#include "loom/profile/phase_finding.h"
#include "loom/profile/tensor_advice.h"

namespace loom::profile {
namespace {

std::string rate(double samples_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f samples/s", samples_per_second);
  return buf;
}

// This rank's cores: the host's usable cores over the ranks that share them (at least 1).
int rank_cores(const RunProfile& run) {
  return std::max(1, run.usable_cores / std::max(1, run.ranks_on_host));
}

// "2 usable cores", or with several ranks on the host "2 cores (the host's 4 usable cores over
// its 2 ranks)".
std::string rank_cores_text(const RunProfile& run) {
  const std::string cores = std::to_string(rank_cores(run));
  if (run.ranks_on_host <= 1) return cores + " usable cores";
  return cores + " cores (the host's " + std::to_string(run.usable_cores) +
         " usable cores over its " + std::to_string(run.ranks_on_host) + " ranks)";
}

// How advice names the setting `key`. A script (loom.profile.Steps) gives data.* keys in its
// loom.data.Loader's configuration, picks its own batches unless a Loader makes them, and passes
// micro-batches to loom.pipeline.Pipeline.
std::string named(const RunProfile& run, const std::string& key) {
  if (!run.python) return key;
  if (key == "data.batch_size") return "the batch size (data.batch_size for a loom.data.Loader)";
  if (key.rfind("data.", 0) == 0) return key + " (in the loom.data.Loader's configuration)";
  if (key == "parallel.pipeline.microbatches") return "loom.pipeline.Pipeline's microbatches";
  return key;
}

// How to compute in bf16: runtime.precision, or in a script torch's autocast (what Loom's bf16
// is: autocast with fp32 weights).
std::string bf16_setting(const RunProfile& run) {
  return run.python ? "torch.autocast(\"cpu\", dtype=torch.bfloat16)" : "runtime.precision";
}

// Compute threads set to `threads`: the configuration key, or in a script the call.
std::string threads_setting(const RunProfile& run, int threads) {
  if (run.python) return "loom.runtime.configure(threads=" + std::to_string(threads) + ")";
  return "runtime.threads: " + std::to_string(threads);
}

std::string cores(double n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f cores", n);
  return buf;
}

// How many remote data workers would keep the model fed, by tf.data's autoscaling rule: the
// rate the model would consume samples at if it never waited (the run's rate over the share of
// the step it did not wait), over one worker's throughput — measured when the run had workers,
// else estimated as a worker with this host's cores at this run's cost per sample. "" when
// neither is known.
std::string workers_needed(const RunProfile& run, double waiting, Finding* f = nullptr) {
  if (run.samples_per_second <= 0 || waiting >= 1) return "";
  const double consumption = run.samples_per_second / (1 - waiting);
  double per_worker = 0;
  std::string basis;
  if (run.remote_workers > 0 && run.remote_worker_samples_per_second > 0) {
    per_worker = run.remote_worker_samples_per_second;
    basis = "as measured";
  } else if (run.loader_cpu_seconds_per_sample > 0) {
    per_worker = run.usable_cores / run.loader_cpu_seconds_per_sample;
    basis =
        "estimated for a worker with this host's " + std::to_string(run.usable_cores) + " cores";
  } else {
    return "";
  }
  const int n = static_cast<int>(std::ceil(consumption / per_worker - 1e-9));
  if (f) {
    f->measured["consumed_samples_per_second"] = consumption;
    f->measured["worker_samples_per_second"] = per_worker;
    f->measured["workers_needed"] = n;
  }
  std::string out = "the model would consume " + rate(consumption) +
                    " and one data worker supplies " + rate(per_worker) + " (" + basis + "), so " +
                    std::to_string(n) + " remote data worker" + (n == 1 ? "" : "s") +
                    " would make the run compute-bound (N = consumption / worker throughput";
  if (run.remote_workers > 0) out += "; it had " + std::to_string(run.remote_workers);
  return out + "): set " + named(run, "data.remote.workers");
}

// A worker whose compute takes >= 20% longer than the median worker's: every synchronous step
// waits for it (the stragglers of BytePS#437).
void add_straggler(const RunProfile& run, std::vector<Finding>& out) {
  const std::vector<double>& compute = run.worker_compute_seconds;
  if (compute.size() < 2) return;
  std::vector<double> sorted = compute;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[(sorted.size() - 1) / 2];
  const auto slowest = std::max_element(compute.begin(), compute.end());
  if (median <= 0 || *slowest < 1.2 * median) return;
  const double slower = *slowest / median - 1;
  const auto rank = slowest - compute.begin();
  Finding f{"straggler",
            slower >= 0.5 ? "high" : "moderate",
            "worker rank " + std::to_string(rank) + " computed for " + milliseconds(*slowest) +
                ", the median worker " + milliseconds(median) + " (" + percent(slower) + " slower)",
            "every step waits for it: look for other load, throttling or fewer usable cores on "
            "its host, or move it to another",
            "",
            1 + slower};
  f.measured = {{"rank", static_cast<double>(rank)},
                {"compute_seconds", *slowest},
                {"median_compute_seconds", median},
                {"slower", slower}};
  out.push_back(f);
}

// Parameter servers whose busy time differs by more than 10% of the mean: the busiest one
// sets the pace while the others idle.
void add_server_imbalance(const RunProfile& run, std::vector<Finding>& out) {
  const std::vector<double>& busy = run.server_busy_seconds;
  if (busy.size() < 2) return;
  const auto [idlest, busiest] = std::minmax_element(busy.begin(), busy.end());
  double mean = 0;
  for (double a : busy) mean += a / static_cast<double>(busy.size());
  if (mean <= 0 || (*busiest - *idlest) / mean <= 0.10) return;
  const auto busiest_server = busiest - busy.begin(), idlest_server = idlest - busy.begin();
  Finding f{"server_imbalance",
            "moderate",
            "parameter server " + std::to_string(busiest_server) + " was busy (CPU) for " +
                milliseconds(*busiest) + ", server " + std::to_string(idlest_server) + " for " +
                milliseconds(*idlest) + " (spread " + percent((*busiest - *idlest) / mean) +
                " of the mean)",
            "the plan gives them the same bytes within one part (mostly within one element): the "
            "busier server's host is likely slower (its link or CPU), or smaller parts would "
            "spread the bytes more evenly",
            "parallel.ps.part_mb",
            0};
  f.measured = {{"busiest_server", static_cast<double>(busiest_server)},
                {"busiest_seconds", *busiest},
                {"idlest_server", static_cast<double>(idlest_server)},
                {"idlest_seconds", *idlest},
                {"spread", (*busiest - *idlest) / mean}};
  out.push_back(f);
}

// With data held in memory the loader needs little CPU: compute should have this rank's cores,
// the host's usable cores over the ranks that share them (two ranks of one thread on two cores
// already use them all). When the loader decodes, fewer compute threads can be the right trade;
// --autotune measures it, and what it measured beats this rule.
void add_threads(const RunProfile& run, std::vector<Finding>& out) {
  const int share = rank_cores(run);
  if (run.compute_threads >= share || run.loader_decodes || run.threads_tuned) return;
  const bool shared = run.ranks_on_host > 1;
  std::string advice;
  if (run.python) {
    // A script's "auto" is the host's usable cores, whatever else runs there.
    advice = "call " + threads_setting(run, share) +
             (shared ? " on every rank (threads=\"auto\" would give each all " +
                           std::to_string(run.usable_cores) + " of the host's cores)"
                     : " (or threads=\"auto\": the usable cores)");
  } else {
    advice = std::string("set runtime.threads to auto (") +
             (shared ? "this rank's share of the usable cores)" : "the usable cores)");
  }
  Finding f{"threads",
            "moderate",
            "compute uses " + std::to_string(run.compute_threads) + " of " + rank_cores_text(run),
            advice,
            "runtime.threads",
            0};
  // A script's "auto" is the host's usable cores, whatever else runs there.
  f.suggested = run.python ? std::to_string(share) : "auto";
  f.measured = {{"compute_threads", run.compute_threads}, {"rank_cores", share}};
  out.push_back(f);
}

// Others using this process's cores, beyond the job's own ranks, in cores: a quarter of a core
// names the host as shared (an idle host's daemons use a few hundredths, and a compute thread
// that loses a quarter of its core holds back every parallel region it is part of).
constexpr double kSharedHostCores = 0.25;

// Why the steps' time varied, from what the run measured: data waits that grow with the step
// time, or other processes on its cores; else what to check. Sets the finding's `key` where a
// setting helps, and its measured other_cores and stolen_cores where they were measured.
std::string unsteady_cause(const RunProfile& run, double fast_wall, double slow_wall,
                           double fast_wait, double slow_wait, Finding& f) {
  std::vector<std::string> causes;
  const double longer = slow_wall - fast_wall;
  const double waited = slow_wait - fast_wait;
  if (longer > 0 && waited >= 0.5 * longer) {
    causes.push_back(
        "the input: the slowest tenth of the steps waited " + milliseconds(slow_wait) +
        " for data, the fastest tenth " + milliseconds(fast_wait) + " (" +
        percent(waited / longer) + " of the " + milliseconds(longer) +
        " by which they were slower), so batches arrive unevenly (loader threads short of CPU, "
        "storage or remote data workers that stall); more loader threads or batches prepared "
        "ahead (data.workers, data.prefetch_batches" +
        (run.python ? " in the loom.data.Loader's configuration" : "") + ") even it out");
    f.key = "data.workers";
  }
  if (run.other_cores >= 0) {
    // The job's other ranks on the host run on these cores too: count them as using what this
    // rank used.
    const double own = run.cpu_utilisation * rank_cores(run);
    const int siblings = std::max(0, run.ranks_on_host - 1);
    const double outside = std::max(0.0, run.other_cores - siblings * own);
    f.measured["other_cores"] = outside;
    f.measured["stolen_cores"] = run.stolen_cores;
    if (outside + run.stolen_cores >= kSharedHostCores) {
      std::string text = "a shared host: other processes kept " + cores(outside) +
                         " of this process's cores busy on average";
      if (siblings > 0) {
        text += " (beyond the job's other " + std::to_string(siblings) + " rank" +
                (siblings == 1 ? "" : "s") + " here)";
      }
      if (run.stolen_cores >= 0.05) {
        text += ", and the hypervisor gave " + cores(run.stolen_cores) +
                " of them to other guests (steal)";
      }
      text +=
          ", and steps slow down whenever they run: run on a dedicated host or on cores they "
          "do not use (taskset, a cpuset)";
      if (rank_cores(run) > 1) {
        text += ", or leave them a core (" + threads_setting(run, rank_cores(run) - 1) +
                ") so that no step waits for a compute thread they preempted";
      }
      causes.push_back(text);
    }
  }
  if (causes.empty()) {
    return std::string("neither waiting for data nor ") +
           (run.other_cores >= 0 ? "other processes on its cores explain it"
                                 : "anything measured explains it (other processes' CPU use "
                                   "was not measured here)") +
           ": check the CPU's clock (thermal or power throttling), a cgroup CPU quota the run "
           "reaches (cpu.stat's nr_throttled), swapping, and work that only some steps do "
           "(a rank the step waits for, evaluation, checkpoints)";
  }
  std::string advice = "likely " + causes[0];
  for (size_t i = 1; i < causes.size(); ++i) advice += "; also " + causes[i];
  return advice;
}

// The steady steps' time spread: p90 / p10 >= 1.5 (see advisor.h), over at least 20 steps so
// that each tenth holds two or more. Quantiles are nearest-rank.
void add_unsteady_throughput(const RunProfile& run, std::vector<Finding>& out) {
  const std::vector<double>& wall = run.step_seconds;
  const size_t n = wall.size();
  if (n < 20) return;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return wall[a] < wall[b]; });
  auto quantile = [&](double q) {
    return wall[order[static_cast<size_t>(std::lround(q * static_cast<double>(n - 1)))]];
  };
  const double p10 = quantile(0.1), median = quantile(0.5), p90 = quantile(0.9);
  if (p10 <= 0 || p90 < 1.5 * p10) return;
  // The fastest and slowest tenths: their mean step and data wait.
  const size_t tenth = n / 10;
  const bool waits = run.step_data_wait_seconds.size() == n;
  double fast_wall = 0, slow_wall = 0, fast_wait = 0, slow_wait = 0, sum = 0;
  for (size_t i = 0; i < n; ++i) sum += wall[i];
  for (size_t i = 0; i < tenth; ++i) {
    const size_t fast = order[i], slow = order[n - 1 - i];
    fast_wall += wall[fast] / static_cast<double>(tenth);
    slow_wall += wall[slow] / static_cast<double>(tenth);
    if (waits) {
      fast_wait += run.step_data_wait_seconds[fast] / static_cast<double>(tenth);
      slow_wait += run.step_data_wait_seconds[slow] / static_cast<double>(tenth);
    }
  }
  const double mean = sum / static_cast<double>(n);
  const double spread = p90 / p10;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1fx", spread);
  std::string evidence = "over " + std::to_string(n) + " steady steps the step took " +
                         milliseconds(p10) + " at p10, " + milliseconds(median) +
                         " at the median and " + milliseconds(p90) + " at p90 (" + ratio +
                         "; fastest " + milliseconds(wall[order.front()]) + ", slowest " +
                         milliseconds(wall[order.back()]) + ")";
  if (run.samples_per_second > 0) {
    // Samples a step: the run's rate times its mean step.
    const double per_step =
        run.samples_per_second * (run.steps > 0 && run.step_times.wall > 0
                                      ? run.step_times.wall / static_cast<double>(run.steps)
                                      : mean);
    evidence += ": " + rate(per_step / p90) + " at p90 against " + rate(per_step / p10) +
                " at p10 (" + rate(run.samples_per_second) + " overall)";
  }
  Finding f{"unsteady_throughput", spread >= 3 ? "high" : "moderate", evidence, "", "", mean / p10};
  f.measured = {
      {"p10_seconds", p10}, {"median_seconds", median},       {"p90_seconds", p90},
      {"spread", spread},   {"fast_wait_seconds", fast_wait}, {"slow_wait_seconds", slow_wait}};
  f.advice = unsteady_cause(run, fast_wall, slow_wall, fast_wait, slow_wait, f);
  out.push_back(f);
}

// Overfitting: the validation loss rose at each of the last kOverfitRises evaluations. There is
// an evaluation an epoch, so a run has few, and a single rise is often the noise of a small
// validation split; three in a row happen by chance to 1 in 24 series of exchangeable noisy
// values, and the train loss falling over them says the model is fitting its training data
// rather than plateauing.
constexpr size_t kOverfitRises = 3;
// The last validation loss this far above the best (5%): the model the run ends with has lost
// enough to make restoring the best checkpoint worth it (high), rather than a drift (moderate).
constexpr double kOverfitHighRise = 0.05;

std::string loss_text(double loss) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", loss);
  return buf;
}

void add_overfitting(const RunProfile& run, std::vector<Finding>& out) {
  const std::vector<Evaluation>& evals = run.evaluations;
  if (evals.size() < kOverfitRises + 1) return;
  const size_t first = evals.size() - 1 - kOverfitRises;  // where the rise starts
  for (size_t i = first + 1; i < evals.size(); ++i) {
    if (!(evals[i].eval_loss > evals[i - 1].eval_loss)) return;
  }
  const Evaluation& start = evals[first];
  const Evaluation& last = evals.back();
  if (!(last.train_loss < start.train_loss)) return;
  const auto lowest = std::min_element(
      evals.begin(), evals.end(),
      [](const Evaluation& a, const Evaluation& b) { return a.eval_loss < b.eval_loss; });
  int64_t best_step = lowest->step;
  double best_loss = lowest->eval_loss;
  // A resumed run's best may be from before its resume, which only checkpoint.keep_best's record
  // knows (when it ranks by the loss: perplexity is its exponential).
  if (run.best_checkpoint_step >= 0 && run.best_checkpoint_step < evals.front().step) {
    const std::string& metric = run.best_checkpoint_metric;
    if ((metric == "test_loss" && run.best_checkpoint_value < best_loss) ||
        (metric == "test_perplexity" && run.best_checkpoint_value > 0 &&
         std::log(run.best_checkpoint_value) < best_loss)) {
      best_step = run.best_checkpoint_step;
      best_loss =
          metric == "test_loss" ? run.best_checkpoint_value : std::log(run.best_checkpoint_value);
    }
  }
  const double rise = best_loss > 0 ? last.eval_loss / best_loss - 1 : 0;
  Finding f{"overfitting", rise >= kOverfitHighRise ? "high" : "moderate",
            "the validation loss rose at each of the last " + std::to_string(kOverfitRises) +
                " evaluations, from " + loss_text(start.eval_loss) + " at step " +
                std::to_string(start.step) + " to " + loss_text(last.eval_loss) + " at step " +
                std::to_string(last.step) + ", while the train loss fell from " +
                loss_text(start.train_loss) + " to " + loss_text(last.train_loss) +
                "; the best validation loss was " + loss_text(best_loss) + " at step " +
                std::to_string(best_step),
            "", "checkpoint.keep_best"};
  f.step = best_step;
  f.measured = {{"best_loss", best_loss}, {"last_loss", last.eval_loss}, {"rise", rise}};
  if (run.best_checkpoint_step == best_step) {
    f.advice = "checkpoint.keep_best kept step " + std::to_string(best_step) + "'s checkpoint (" +
               run.best_checkpoint + "): use it rather than the last";
  } else if (run.best_checkpoint_step >= 0) {
    f.suggested = "test_loss";
    f.advice = "checkpoint.keep_best kept step " + std::to_string(run.best_checkpoint_step) +
               "'s checkpoint (" + run.best_checkpoint + ", the best by " +
               run.best_checkpoint_metric + "); checkpoint.keep_best: test_loss would keep step " +
               std::to_string(best_step) + "'s, the lowest validation loss";
  } else {
    f.suggested = "test_loss";
    f.advice =
        "set checkpoint.keep_best: test_loss to keep the best evaluation's checkpoint (step " +
        std::to_string(best_step) + " here), which checkpoint.keep alone deletes";
  }
  f.advice +=
      "; to generalize better: more training data, more dropout (model.dropout, or "
      "model.gpt.dropout for a GPT), weight decay (optimizer.weight_decay), or fewer epochs "
      "(train.epochs)";
  out.push_back(f);
}

// The rules about the host's CPU doing the step's compute: none applies to a GPU's step.
void add_cpu_findings(const RunProfile& run, std::vector<Finding>& out) {
  if (run.on_gpu()) return;
  auto share = [&](Phase p) { return run.step_times.share(p); };
  add_threads(run, out);

  if (run.precision == "fp32" && run.blas == "reference") {
    const double compute = share(Phase::kForward) + share(Phase::kBackward);
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", run.fp32_matmul_flops_per_second / 1e9);
    Finding f{"reference_blas",
              "high",
              std::string("fp32 matrix products ran on netlib's reference BLAS (") + run.blas_path +
                  "): " + rate + " measured",
              std::string("install Debian's OpenBLAS for OpenMP (apt-get install ") +
                  kFastBlasPackage +
                  "), which LibTorch then uses for fp32 matrix products, 16-30x faster; or "
                  "compute in bf16 (" +
                  bf16_setting(run) + ") where the CPU has it natively",
              "runtime.precision",
              compute < 1 ? 1 / (1 - compute) : 0};
    f.measured = {{"fp32_matmul_flops_per_second", run.fp32_matmul_flops_per_second}};
    out.push_back(f);
  }
  if (run.precision == "fp32" && run.native_bf16) {
    Finding f{"precision",
              "moderate",
              "the run computed in fp32 on a CPU with native bf16 (AVX-512 BF16 or AMX)",
              run.python ? "compute under " + bf16_setting(run) + " (it keeps fp32 weights)"
                         : "set runtime.precision to auto or bf16 (bf16 autocast keeps fp32 "
                           "weights)",
              "runtime.precision",
              0};
    f.suggested = "bf16";
    out.push_back(f);
  }
  if (run.convolutional && run.memory_format == "contiguous") {
    Finding f{"memory_format",
              "moderate",
              "a convolutional model ran in the contiguous (NCHW) layout",
              std::string(run.python ? "put the model and its batches in channels_last "
                                       "(model.to(memory_format=torch.channels_last), "
                                       "loom.data.Loader(channels_last=True))"
                                     : "set runtime.memory_format to auto or channels_last") +
                  ", which oneDNN's CPU convolutions prefer",
              "runtime.memory_format",
              0};
    f.suggested = "channels_last";
    out.push_back(f);
  }
  if (run.cpu_utilisation > 0 && run.cpu_utilisation < 0.5 && run.batch_size < 64) {
    Finding f{"low_utilisation",
              "moderate",
              "the process used " + percent(run.cpu_utilisation) + " of " +
                  std::to_string(rank_cores(run)) + " cores with batches of " +
                  std::to_string(run.batch_size),
              "raise " + named(run, "data.batch_size") +
                  " so each operation has more work to split across threads",
              "data.batch_size",
              0};
    f.measured = {{"cpu_utilisation", run.cpu_utilisation},
                  {"rank_cores", rank_cores(run)},
                  {"batch_size", static_cast<double>(run.batch_size)}};
    out.push_back(f);
  }
}

}  // namespace

std::vector<Finding> advise(const RunProfile& run) {
  std::vector<Finding> out;
  auto share = [&](Phase p) { return run.step_times.share(p); };

  const double waiting = share(Phase::kDataWait);
  if (waiting >= 0.05) {
    Finding f = phase_finding(run, Phase::kDataWait, "input_bound", 0.20, "data.workers");
    f.measured["loader_threads"] = run.loader_threads;
    f.measured["rank_cores"] = rank_cores(run);
    const std::string workers = workers_needed(run, waiting, &f);
    if (run.remote_workers > 0 && !workers.empty()) {
      f.advice = workers;
      f.key = "data.remote.workers";
      f.suggested = std::to_string(static_cast<int>(f.measured.at("workers_needed")));
    } else if (run.threads_tuned) {
      // The autotuner measured the split of the cores, which beats any rule about it.
      f.measured["compute_threads"] = run.compute_threads;
      f.advice = "the autotuner already chose the split of the cores (data.workers " +
                 std::to_string(run.loader_threads) + ", runtime.threads " +
                 std::to_string(run.compute_threads) +
                 "): make data.transforms cheaper, or add CPU workers";
      f.key = "data.transforms";
      if (!workers.empty()) f.advice += "; " + workers;
    } else if (run.loader_threads < rank_cores(run)) {
      f.advice =
          "give the loader more threads: " + named(run, "data.workers") + " is " +
          std::to_string(run.loader_threads) + " of " + rank_cores_text(run) +
          (run.python ? "" : " (or let loom train --autotune measure the split of the cores)");
    } else {
      f.advice = "the loader already has every core (data.workers " +
                 std::to_string(run.loader_threads) + "): make " + named(run, "data.transforms") +
                 " cheaper, or add CPU workers";
      f.key = "data.transforms";
      if (!workers.empty()) f.advice += "; " + workers;
    }
    out.push_back(f);
  }

  if (share(Phase::kCommExposed) >= 0.10 && run.pipeline_ranks > 0) {
    Finding f = phase_finding(run, Phase::kCommExposed, "exposed_comm", 0.30,
                              "parallel.pipeline.microbatches");
    f.advice =
        "stages wait for activations and gradients in transfer: fewer, larger micro-batches "
        "send fewer messages (" +
        named(run, "parallel.pipeline.microbatches") + " is " +
        std::to_string(run.pipeline_microbatches) +
        "), and stages on one host exchange over shared memory";
    f.measured["microbatches"] = static_cast<double>(run.pipeline_microbatches);
    out.push_back(f);
  } else if (share(Phase::kCommExposed) >= 0.10) {
    Finding f = phase_finding(run, Phase::kCommExposed, "exposed_comm", 0.30, "data.batch_size");
    f.advice = "gradient exchange is not hidden behind backward: raise " +
               named(run, "data.batch_size") + " so each step computes longer per byte exchanged";
    out.push_back(f);
  }

  if (share(Phase::kBubble) >= 0.10) {
    Finding f = phase_finding(run, Phase::kBubble, "pipeline_bubble", 0.30,
                              "parallel.pipeline.microbatches");
    const std::string microbatches = named(run, "parallel.pipeline.microbatches");
    if (run.pipeline_microbatches > 0) {
      f.measured["microbatches"] = static_cast<double>(run.pipeline_microbatches);
    }
    if (run.better_microbatches > 0) {
      f.advice = "raise " + microbatches + " to " + std::to_string(run.better_microbatches) +
                 " (predicted bubble " + percent(run.better_bubble) + ")";
      f.suggested = std::to_string(run.better_microbatches);
      f.measured["predicted_share"] = run.better_bubble;
    } else {
      // A script's run does not say its count.
      const std::string now =
          run.pipeline_microbatches > 0 ? " is " + std::to_string(run.pipeline_microbatches) : "";
      f.advice = "stages wait for each other: more micro-batches (" + microbatches + now +
                 ") shrink the fill and drain, and `loom pipeline plan` shows whether unequal "
                 "stages cause the rest";
    }
    out.push_back(f);
  }

  add_tensor_time(run, out);
  add_gpu_findings(run, out);
  add_cpu_findings(run, out);
  add_straggler(run, out);
  add_server_imbalance(run, out);
  add_memory_savings(run, out);
  if (run.memory_fraction >= 0.90) {
    Finding f{"memory",
              "high",
              "peak resident memory was " + percent(run.memory_fraction) + " of the machine's",
              "lower " + named(run, "data.batch_size") + " or " +
                  named(run, "data.prefetch_bytes") + " before the system starts swapping",
              "data.batch_size",
              0};
    f.measured = {{"memory_share", run.memory_fraction}};
    out.push_back(f);
  }
  add_unsteady_throughput(run, out);
  add_overfitting(run, out);
  return out;
}

}  // namespace loom::profile
