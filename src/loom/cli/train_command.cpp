// `loom train [CONFIG.yaml ...] [--set key=value ...] [--out DIR] [--resume] [--trace]
// [--autotune]`
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/cli/progress.h"
#include "loom/cli/ps_job.h"
#include "loom/cli/stop_signals.h"
#include "loom/comm/make_communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/tcp_store.h"
#include "loom/comm/world_info.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/settings.h"
#include "loom/core/termination.h"
#include "loom/core/topology.h"
#include "loom/train/job.h"
#include "loom/train/trainer.h"

namespace loom::cli {
namespace {

struct TrainArgs {
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  std::string out_dir;
  bool resume = false;
  bool trace = false;
  bool autotune = false;
};

std::string timestamped_run_dir() {
  std::time_t now = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "runs/%Y%m%d-%H%M%S", std::localtime(&now));
  return buf;
}

// --resume without --out continues the newest run under runs/.
std::string newest_run_dir() {
  namespace fs = std::filesystem;
  std::string newest;
  if (fs::is_directory("runs")) {
    for (const auto& entry : fs::directory_iterator("runs")) {
      if (entry.is_directory() && entry.path().string() > newest) newest = entry.path().string();
    }
  }
  if (newest.empty())
    throw ConfigError("--resume: no --out given and no run under runs/ to resume");
  return newest;
}

// The configuration files a run reads: those given, or, resuming without any, the run's own
// config.yaml (so that `--resume --set train.epochs=6` goes on with the run's settings, not the
// defaults); a --set applies over either.
std::vector<std::string> run_config_paths(const std::vector<std::string>& given,
                                          const std::string& out_dir, bool resume) {
  if (!given.empty() || !resume) return given;
  const std::string own = out_dir + "/config.yaml";
  if (!std::filesystem::exists(own)) return given;
  LOOM_LOG(kInfo, "train") << "resuming with the run's own configuration, " << own;
  return {own};
}

// "step 10.3 ms: backward 47%  forward 44%  optimizer 7%  data_wait 2%", largest first.
void print_step_time(const train::TrainSummary& s) {
  if (s.steady_steps == 0 || s.step_times.wall <= 0) return;
  std::vector<std::pair<double, const char*>> shares;
  for (size_t i = 0; i < profile::kPhaseCount; ++i) {
    const double share = s.step_times.share(static_cast<profile::Phase>(i));
    if (share >= 0.005)
      shares.emplace_back(share, profile::phase_name(static_cast<profile::Phase>(i)));
  }
  std::sort(shares.rbegin(), shares.rend());
  std::printf("step %.1f ms:", 1e3 * s.step_times.wall / static_cast<double>(s.steady_steps));
  for (const auto& [share, name] : shares) std::printf("  %s %.0f%%", name, 100 * share);
  if (s.mfu() > 0) {
    std::printf("  |  %.2f GFLOP/s, MFU %.1f%% of a %.1f GFLOP/s %s matmul",
                s.achieved_flops_per_second() / 1e9, 100 * s.mfu(), s.peak_flops_per_second / 1e9,
                s.peak_dtype.c_str());
  }
  std::printf("\n");
}

// How the ranks shared the work: the gradient exchange over the workers or replicas, and a
// pipeline's schedule and memory.
void print_layout(const train::TrainSummary& s) {
  const parallel::LayoutPlan& plan = s.plan;
  const parallel::LayoutReport& layout = s.layout;
  if (plan.servers) {
    std::printf(
        "%s\n  %d workers, %.1f MB pushed and pulled per step, %.0f%% of it hidden behind "
        "backward\n",
        layout.exchange.c_str(), plan.trainers, s.comm_bytes_per_step / 1e6, 100 * s.comm_overlap);
  } else if (plan.data.replicas > 1) {
    std::printf("data parallel: %d ranks over %s, %d buckets, %.1f MB all-reduced per step, ",
                plan.data.replicas, layout.backend.c_str(), s.buckets, s.comm_bytes_per_step / 1e6);
    // Under NCCL the host never waits for an exchange (the GPU's stream does), so the host's
    // overlap says nothing: the GPU's clock says how long the step waited for it.
    if (layout.backend.find("nccl") != std::string::npos && s.device_step_times) {
      std::printf("the GPU waiting for it %.0f%% of its step\n",
                  100 * s.device_step_times->share(profile::Phase::kCommExposed));
    } else {
      std::printf("%.0f%% of it hidden behind backward\n", 100 * s.comm_overlap);
    }
  }
  if (plan.pipeline) {
    std::string peaks;
    for (double bytes : layout.peak_bytes) {
      peaks += (peaks.empty() ? "" : " / ") + std::to_string(std::lround(bytes / (1 << 20)));
    }
    std::printf(
        "pipeline: %d ranks over %s, %s schedule, %lld micro-batches, blocks per stage %s, peak "
        "tensor memory per rank %s MB\n",
        plan.pipeline->ranks, layout.backend.c_str(), layout.schedule.c_str(),
        static_cast<long long>(plan.step.micro_batches), layout.split.c_str(), peaks.c_str());
  }
}

// "autotune: data.workers 1 -> 2, runtime.threads 2 -> 1: 412 samples/s (380 at the start) ..."
void print_autotune(const train::TrainSummary& s, const std::string& out_dir) {
  if (!s.autotune_skipped.empty())
    std::printf("autotune: skipped, %s\n", s.autotune_skipped.c_str());
  if (!s.autotune) return;
  const profile::AutotuneResult& r = *s.autotune;
  std::string changes;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    if (r.chosen[i] == r.start[i]) continue;
    char change[96];
    std::snprintf(change, sizeof change, "%s%s %g -> %g", changes.empty() ? "" : ", ",
                  r.keys[i].c_str(), r.start[i], r.chosen[i]);
    changes += change;
  }
  std::printf(
      "autotune: %s%s: %.0f samples/s (%.0f at the start), %zu trials in %lld steps%s; "
      "wrote %s/autotune.yaml\n",
      s.autotune_resumed ? "chosen before the resume, " : "",
      changes.empty() ? "kept the starting settings" : changes.c_str(), r.chosen_score,
      r.start_score, r.trials.size(), static_cast<long long>(r.steps),
      r.complete ? "" : " (stopped at autotune.max_share)", out_dir.c_str());
}

// LOOM_RESTARTS, as `loom launch` writes it.
std::vector<train::RestartRecord> restarts_from_environment() {
  const std::string text = setting("LOOM_RESTARTS");
  std::vector<train::RestartRecord> restarts;
  if (text.empty()) return restarts;
  try {
    for (const auto& r : nlohmann::json::parse(text)) {
      train::RestartRecord record;
      record.cause = r.at("cause");
      record.failed_at_step = r.at("failed_at_step");
      record.resumed_from_step = r.at("resumed_from_step");
      restarts.push_back(record);
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("environment variable LOOM_RESTARTS is not what loom launch writes: " +
                      std::string(e.what()));
  }
  return restarts;
}

int run_train(const TrainArgs& args) {
  // Until training begins a stop signal ends the run at once, with 128 + N: there is nothing to
  // save yet. Installed before the front's hold ends, so that one held since the start does too.
  end_on_stop_signals("train");
  release_stop_signals();
  std::vector<std::string> overrides = args.overrides;
  if (args.trace) overrides.push_back("profile.trace=true");
  if (args.autotune) overrides.push_back("autotune.enabled=true");
  // A restarted attempt of `loom launch --max-restarts` goes on from the run's checkpoint.
  const bool restarted = comm::restart_attempt() > 0;
  if (restarted && args.out_dir.empty()) {
    throw ConfigError(
        "--out: loom launch --max-restarts restarts `loom train` from its output "
        "directory; name one (e.g. --out runs/job)");
  }
  const std::string out_dir = !args.out_dir.empty() ? args.out_dir
                              : args.resume         ? newest_run_dir()
                                                    : timestamped_run_dir();
  const bool resume = args.resume || restarted;
  const Config config =
      load_run_config(run_config_paths(args.config_paths, out_dir, resume), overrides);
  train::TrainOptions options;
  options.topology = detect_topology();
  options.restarts = restarts_from_environment();

  // Started as one rank of several (loom launch, torchrun, Slurm, Open MPI): data parallel,
  // a pipeline's stages, or a parameter server's worker or server.
  const comm::WorldInfo world = comm::world_from_environment();
  if (world.world > 1 && args.out_dir.empty()) {
    throw ConfigError(
        "--out: a run of several ranks needs an output directory that every rank "
        "names the same (e.g. --out runs/ddp)");
  }
  train::JobEntry entry = enter_job_of_command(config, world, args.out_dir);
  if (entry.served) return report_serving(entry.job, *entry.served);
  entry.job.fill(options);
  options.out_dir = out_dir;
  options.resume = resume;
  Progress progress(stdout);
  if (world.rank == 0) options.observer = &progress;

  // From here on SIGTERM (spot preemption, or the launcher passing one on) finishes the step
  // and commits a checkpoint rather than ending the process where it stands; before, there is
  // nothing to save and it ends the process (end_on_stop_signals above). SIGINT and SIGHUP
  // still end it at once.
  set_stop_activity("training");
  options.termination = &catch_termination();
  train::TrainSummary s = train::train(config, options);
  // Preempted with its checkpoint committed: "resumable", which launchers and schedulers can
  // tell from a failure. Without one (checkpoints off, or the save failed under on_error:
  // warn) it ends as SIGTERM would have ended it.
  const int exit_code = !s.preempted             ? 0
                        : s.preempted_checkpoint ? kPreemptedExitCode
                                                 : 128 + SIGTERM;
  if (world.rank != 0) return exit_code;  // rank 0 reports for all
  if (s.preempted) {
    std::printf("\npreempted (SIGTERM) after step %lld: %s\n", static_cast<long long>(s.steps),
                s.preempted_checkpoint ? ("checkpoint committed at " + s.last_checkpoint +
                                          "; --resume continues exactly")
                                             .c_str()
                                       : "no checkpoint of this step was committed");
    return exit_code;
  }
  char result[128] = "no evaluation";
  if (s.evaluated && s.test_perplexity > 0) {
    std::snprintf(result, sizeof result, "val loss %.4f  perplexity %.2f", s.test_loss,
                  s.test_perplexity);
  } else if (s.evaluated) {
    std::snprintf(result, sizeof result, "test accuracy %.2f%%  test loss %.4f",
                  100 * s.test_accuracy, s.test_loss);
  }
  const bool tokens = s.tokens_per_sample > 0;
  std::printf("\nsummary: %s  %lld steps in %s  %.0f %s/s (%s%s%s, %s, %d threads)\n", result,
              static_cast<long long>(s.steps), format_duration(s.wall_seconds).c_str(),
              tokens ? s.tokens_per_second() : s.samples_per_second, tokens ? "tokens" : "samples",
              s.runtime.device == "cpu" ? "" : s.runtime.device.c_str(),
              s.runtime.device == "cpu" ? "" : ", ", s.runtime.precision.c_str(),
              s.runtime.memory_format.c_str(), s.runtime.threads);
  print_step_time(s);
  for (const auto& r : s.restarts) {
    std::printf("restarted after: %s", r.cause.c_str());
    if (r.lost_steps() >= 0) {
      std::printf(" (at step %lld; went on from step %lld, %lld steps lost)",
                  static_cast<long long>(r.failed_at_step),
                  static_cast<long long>(r.resumed_from_step),
                  static_cast<long long>(r.lost_steps()));
    }
    std::printf("\n");
  }
  print_layout(s);
  print_autotune(s, options.out_dir);
  if (s.best_checkpoint) {
    const train::BestCheckpoint& best = *s.best_checkpoint;
    std::printf("best checkpoint (checkpoint.keep_best): %s, %s %.4f at step %lld\n",
                best.path.c_str(), best.metric.c_str(), best.value,
                static_cast<long long>(best.step));
  }
  for (const auto& n : s.notices) {
    std::printf("notice: %s; %s\n", n.evidence.c_str(), n.advice.c_str());
  }
  for (const auto& f : s.findings) {
    std::printf("advice (%s): %s; %s", f.severity.c_str(), f.evidence.c_str(), f.advice.c_str());
    if (f.max_gain > 0) std::printf(" (at most %.2fx faster)", f.max_gain);
    std::printf("\n");
  }
  std::printf("wrote %s/summary.json, metrics.jsonl, config.yaml, checkpoints/%s\n",
              options.out_dir.c_str(), config.train.tensorboard ? ", TensorBoard events" : "");
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* sub =
      app.add_subcommand("train", "Train a model (default: the small CNN on Fashion-MNIST)");
  sub->add_option("config", args->config_paths,
                  "YAML configuration files (default: built-in defaults); a key in a later file "
                  "replaces the same key in an earlier one, e.g. my.yaml runs/tuned/autotune.yaml");
  add_set_option(sub, args->overrides);
  sub->add_option("--out", args->out_dir, "Output directory (default: runs/<timestamp>)");
  sub->add_flag("--resume", args->resume,
                "Continue from the latest checkpoint in the output directory, with the run's "
                "own config.yaml unless configuration files are given (--set applies over it; "
                "a change to the model, the optimizer or the data's shape is refused)");
  sub->add_flag("--trace", args->trace,
                "Write a Chrome trace of some steps to OUT/trace.json (profile.trace)");
  sub->add_flag("--autotune", args->autotune,
                "Tune loader and compute threads, prefetch depth and bucket size in the first "
                "steps; writes OUT/autotune.yaml (autotune.enabled)");
  return {sub, [args] { return run_train(*args); }, /*handles_stop_signals=*/true};
}

}  // namespace loom::cli
