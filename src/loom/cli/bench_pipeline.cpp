// `loom bench pipeline [CONFIG ...] [--set ...] [--steps N] [--json FILE]`, under
// `loom launch --nproc-per-node P`: runs the configured pipeline for real and sets the measured
// step against the simulator's prediction. Every rank plans (profiles the blocks, partitions,
// simulates) at once and rank 0's split is shared; every rank then runs its stages with the
// PipelineExecutor on one fixed batch (no loader in the timed steps, as in the simulation), one
// thread each. Rank 0 prints the simulated and the median measured step, the throughput and every
// rank's peak memory growth. With one process it runs the whole model on all usable cores: the
// reference for the same global batch.
#include <ATen/Parallel.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/comm/make_communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/world_info.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/median.h"
#include "loom/models/loss.h"
#include "loom/models/recompute.h"
#include "loom/parallel/accumulating_executor.h"
#include "loom/parallel/local_grad_sync.h"
#include "loom/parallel/pipeline/pipeline_executor.h"
#include "loom/parallel/pipeline/pipeline_layout.h"
#include "loom/parallel/pipeline/pipeline_plan.h"
#include "loom/train/pipeline_planning.h"

namespace loom::cli {
namespace {

namespace pp = parallel::pipeline;

struct PipelineBenchArgs {
  std::vector<std::string> config_paths, overrides;
  int steps = 10;
  std::string json;
};

struct Silent : parallel::StepObserver {
  void enter(Phase) override {}
};

int run_pipeline_bench(const PipelineBenchArgs& args) {
  const comm::WorldInfo world = comm::world_from_environment();
  // One stage a rank: part of reading the configuration, as a --set would be.
  std::vector<std::string> overrides = args.overrides;
  overrides.push_back("parallel.pipeline.stages=" + std::to_string(world.world));
  const Config config = load_run_config(args.config_paths, overrides);
  const Topology topology = detect_topology();
  std::shared_ptr<comm::Rendezvous> rendezvous;
  std::unique_ptr<comm::Communicator> comm;
  if (world.world > 1) {
    rendezvous = comm::Rendezvous::connect(world, std::chrono::seconds(60));
    comm = comm::make_communicator(config.comm.backend, rendezvous, comm::CommOptions{});
  }
  const bool leader = world.rank == 0;

  // Every rank plans at the same time, so that the blocks are profiled while the other cores
  // are as busy as they will be in the run; rank 0's plan is the one used (profiles differ a
  // little between processes).
  const pp::PipelinePlan plan = pp::plan_pipeline(config, config.data.batch_size, topology,
                                                  train::model_on_first_batch_of(config, topology));
  const pp::Schedule& schedule = plan.schedule;
  const std::vector<int> split =
      pp::shared_split(comm.get(), plan.partition.split_counts(), schedule.stages);

  // The model, on one fixed batch.
  pp::ModelOnBatch setup = train::model_on_first_batch(config, config.data.batch_size, topology,
                                                       plan.recompute_every_chosen > 0
                                                           ? plan.recompute_every_chosen
                                                           : models::recompute_every(config.train));
  auto& model = setup.model;
  at::set_num_threads(world.world > 1 ? 1 : topology.usable_cores);
  const at::Tensor& images = setup.input;
  const at::Tensor& labels = setup.targets;
  const int64_t m = config.parallel.pipeline.microbatches;
  const int64_t per = images.size(0) / m;
  const auto micro_batch = [&](int64_t k) {
    return parallel::MicroBatch{images.narrow(0, k * per, per), labels.narrow(0, k * per, per)};
  };

  const std::unique_ptr<models::Loss> loss = models::make_task_loss(setup.task);
  Silent silent;
  std::unique_ptr<parallel::StepExecutor> executor;
  std::unique_ptr<parallel::GradSync> sync;
  std::vector<at::Tensor> mine;
  if (world.world > 1) {
    const auto stages = pp::stage_blocks(model->blocks(), split);
    const models::NamedTensors owned = pp::keep_own_stages(stages, schedule, world.rank).parameters;
    for (auto& [name, p] : owned) mine.push_back(p);
    sync = std::make_unique<parallel::LocalGradSync>(owned);
    pp::PipelineExecutorOptions options;
    options.autocast = setup.autocast;
    executor = std::make_unique<pp::PipelineExecutor>(schedule, stages, *loss, *sync, *comm, silent,
                                                      options);
  } else {
    for (auto& [name, p] : model->named_parameters()) mine.push_back(p);
    sync = std::make_unique<parallel::LocalGradSync>(model->named_parameters());
    executor = std::make_unique<parallel::AccumulatingExecutor>(
        *model, *loss, *sync, silent, parallel::AccumulatingOptions{m, setup.autocast});
  }
  torch::optim::SGD optimizer(mine, torch::optim::SGDOptions(0.01).momentum(0.9));

  const auto step = [&] {
    executor->run(micro_batch);
    optimizer.step();
  };
  for (int i = 0; i < 2; ++i) step();  // warm-up: allocator, oneDNN kernels
  if (comm) comm->barrier()->wait(comm->options().timeout);
  // The peak of the timed steps alone (not of planning or loading).
  if (const auto* a = installed_caching_cpu_allocator()) a->reset_peak();
  std::vector<double> seconds;
  for (int i = 0; i < args.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const std::vector<double> peaks = pp::peak_bytes_by_rank(comm.get());
  if (!leader) return 0;

  const double measured = upper_median(seconds);
  const double samples = static_cast<double>(per * m);
  nlohmann::ordered_json out = {{"model", model->name()},
                                {"ranks", world.world},
                                {"microbatches", m},
                                {"samples_per_step", samples},
                                {"measured_step_seconds", measured},
                                {"measured_samples_per_second", samples / measured}};
  std::printf(
      "%s, %d rank%s, %lld micro-batches of %lld samples: measured step %.1f ms (median of "
      "%d), %.1f samples/s\n",
      model->name().c_str(), world.world, world.world == 1 ? "" : "s", static_cast<long long>(m),
      static_cast<long long>(per), 1e3 * measured, args.steps, samples / measured);
  if (world.world > 1) {
    const double simulated = plan.simulation.step_seconds;
    std::printf(
        "%s, split %s: simulated step %.1f ms (bubble %.1f%%), measured / simulated %.3f, "
        "throughput %.0f%% of the simulated\n",
        schedule.name.c_str(), plan.partition.split().c_str(), 1e3 * simulated,
        100 * plan.simulation.bubble_fraction, measured / simulated, 100 * simulated / measured);
    out["schedule"] = schedule.name;
    out["split"] = plan.partition.split();
    out["simulated_step_seconds"] = simulated;
    out["simulated_bubble"] = plan.simulation.bubble_fraction;
    out["predicted_stage_memory_mb"] = nlohmann::json::array();
    for (const auto& s : plan.partition.stages) {
      out["predicted_stage_memory_mb"].push_back(s.memory_bytes / (1 << 20));
    }
  }
  out["peak_memory_mb"] = nlohmann::json::array();
  for (int r = 0; r < world.world; ++r) {
    const double mb = peaks[static_cast<size_t>(r)] / (1 << 20);
    out["peak_memory_mb"].push_back(mb);
    std::printf("rank %d: peak tensor memory during the steps %.1f MB\n", r, mb);
  }
  if (!args.json.empty()) std::ofstream(args.json) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

Command add_bench_pipeline_command(CLI::App& bench) {
  auto args = std::make_shared<PipelineBenchArgs>();
  CLI::App* sub = bench.add_subcommand(
      "pipeline", "Measured pipeline step against the simulated one (under loom launch)");
  sub->add_option("config", args->config_paths, "YAML configuration files, later keys winning");
  add_set_option(sub, args->overrides);
  sub->add_option("--steps", args->steps, "Timed steps (after two warm-up steps)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--json", args->json, "Also write the result to this JSON file (rank 0)");
  return {sub, [args] { return run_pipeline_bench(*args); }};
}

}  // namespace loom::cli
