// `loom pipeline plan [CONFIG ...] [--set ...] [--trace FILE] [--csv FILE] [--json]`: what a
// pipeline-parallel run of the configuration would do, before it runs: the schedule, the model's
// blocks as profiled here, the partition into stages with each stage's predicted time and memory,
// and the simulated step (time, bubble, peak activations); in words, or as one JSON object.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/parallel/pipeline/pipeline_plan.h"
#include "loom/parallel/pipeline/schedule_csv.h"
#include "loom/train/pipeline_planning.h"

namespace loom::cli {
namespace {

struct PipelineArgs {
  std::vector<std::string> config_paths, overrides;
  std::string trace, csv;
  bool json = false;
  int replicas = 1;
};

// The simulated step as a Chrome trace: a process per rank, a slice per action.
std::string trace_json(const parallel::pipeline::PipelinePlan& p) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < p.simulation.timeline.size(); ++r) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", r},
                      {"args", {{"name", "rank " + std::to_string(r)}}}});
    for (const auto& t : p.simulation.timeline[r]) {
      if (t.end <= t.start) continue;  // sends, and receives that did not wait
      events.push_back({{"ph", "X"},
                        {"name", parallel::pipeline::to_string(t.action)},
                        {"cat", t.action.is_compute() ? "compute" : "wait"},
                        {"pid", r},
                        {"tid", 0},
                        {"ts", t.start * 1e6},
                        {"dur", (t.end - t.start) * 1e6}});
    }
  }
  return nlohmann::json{{"traceEvents", events}}.dump();
}

// --json: the plan describe_plan() puts in words, as numbers (seconds, bytes, counts).
nlohmann::ordered_json plan_json(const parallel::pipeline::PipelinePlan& p) {
  const auto& s = p.schedule;
  nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
  for (const auto& b : p.blocks) blocks.push_back(b.name);
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < p.partition.stages.size(); ++i) {
    const auto& stage = p.partition.stages[i];
    const auto& cost = p.stage_costs[i];
    stages.push_back(
        {{"stage", i},
         {"rank", s.stage_rank[i]},    // its rank within a pipeline
         {"ranks", p.stage_ranks(i)},  // the job's ranks that run it
         {"blocks", stage.blocks},
         {"first_block", p.blocks[static_cast<size_t>(stage.first_block)].name},
         {"last_block", p.blocks[static_cast<size_t>(stage.first_block + stage.blocks - 1)].name},
         {"forward_seconds", cost.forward_seconds},
         {"backward_input_seconds", cost.backward_input_seconds},
         {"backward_weight_seconds", cost.backward_weight_seconds},
         {"send_seconds", cost.send_seconds},
         {"memory_bytes", stage.memory_bytes},
         {"in_flight", p.simulation.peak_in_flight[i]}});
  }
  nlohmann::ordered_json better = nullptr;
  if (p.better_microbatches > 0) {
    better = {{"microbatches", p.better_microbatches},
              {"bubble", p.better_bubble},
              {"step_seconds", p.better_step_seconds}};
  }
  double tensor_comm_seconds = 0;
  for (const auto& b : p.blocks) tensor_comm_seconds += b.tensor_comm_seconds;
  return {{"model", p.model},
          {"blocks", blocks},
          {"schedule", s.name},
          {"ranks", s.ranks},
          {"chunks", s.chunks()},
          {"microbatches", s.microbatches},
          {"microbatch_samples", p.microbatch_samples},
          {"partition", p.manual_split ? "parallel.pipeline.split" : "automatic"},
          {"split", p.partition.split_counts()},
          {"recompute_chosen", p.recompute_every_chosen > 0},
          {"recompute_every_chosen", p.recompute_every_chosen},
          {"zero_chosen", p.zero_chosen},
          {"replicas", p.replicas},
          {"tensor_ranks", p.tensor_ranks},
          {"tensor_comm_seconds", tensor_comm_seconds},
          {"stages", stages},
          {"resident_bytes", p.resident_bytes},
          {"slowest_stage_seconds", p.partition.slowest_seconds()},
          {"uniform_slowest_seconds", p.uniform_slowest_seconds},
          {"parameter_balanced_slowest_seconds", p.parameter_balanced_slowest_seconds},
          {"simulated_step_seconds", p.simulation.step_seconds},
          {"bubble", p.simulation.bubble_fraction},
          {"samples_per_second", p.samples_per_second()},
          {"better_microbatches", better}};
}

}  // namespace

Command add_pipeline_command(CLI::App& app) {
  auto args = std::make_shared<PipelineArgs>();
  CLI::App* pipeline = app.add_subcommand("pipeline", "Pipeline model parallelism");
  pipeline->require_subcommand(1);
  CLI::App* sub = pipeline->add_subcommand(
      "plan", "Profile the model's blocks here, partition them, and simulate the schedule");
  sub->add_option("config", args->config_paths,
                  "YAML configuration files, later keys winning (as loom train)");
  add_set_option(sub, args->overrides);
  sub->add_option("--trace", args->trace, "Write the simulated step as a Chrome trace (JSON)");
  sub->add_option("--csv", args->csv, "Write the schedule's actions as CSV (one row per rank)");
  sub->add_flag("--json", args->json, "Print the plan as one JSON object instead of in words");
  sub->add_option("--replicas", args->replicas,
                  "Data-parallel pipelines the run will have (ranks / stages): ZeRO shards over "
                  "them")
      ->check(CLI::PositiveNumber);
  return {sub, [args] {
            const Config config = load_run_config(args->config_paths, args->overrides);
            const Topology topology = detect_topology();
            const parallel::pipeline::PipelinePlan plan = parallel::pipeline::plan_pipeline(
                config, config.data.batch_size, topology,
                train::model_on_first_batch_of(config, topology), args->replicas);
            if (!args->json) std::fputs(parallel::pipeline::describe_plan(plan).c_str(), stdout);
            if (!args->trace.empty()) {
              replace_file_atomically(args->trace, trace_json(plan));
              if (!args->json) std::printf("trace: %s\n", args->trace.c_str());
            }
            if (!args->csv.empty()) {
              replace_file_atomically(args->csv,
                                      parallel::pipeline::schedule_to_csv(plan.schedule));
              if (!args->json) std::printf("schedule: %s\n", args->csv.c_str());
            }
            if (args->json) std::printf("%s\n", plan_json(plan).dump().c_str());
            return 0;
          }};
}

}  // namespace loom::cli
