// `loom pipeline plan [CONFIG ...] [--set ...] [--trace FILE] [--csv FILE]`: what a pipeline-
// parallel run of the configuration would do, before it runs: the schedule, the model's blocks
// as profiled here, the partition into stages with each stage's predicted time and memory, and
// the simulated step (time, bubble, peak activations).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/core/error.h"
#include "loom/parallel/pipeline/schedule_csv.h"
#include "loom/train/durable_file.h"
#include "loom/train/pipeline_plan.h"

namespace loom::cli {
namespace {

struct PipelineArgs {
  std::vector<std::string> config_paths, overrides;
  std::string trace, csv;
};

double ms(double seconds) { return seconds * 1e3; }
double mb(double bytes) { return bytes / (1 << 20); }

void print_plan(const train::PipelinePlan& p) {
  const auto& s = p.schedule;
  std::printf("pipeline: %s, %d ranks x %d stage%s each, %d micro-batches of %lld samples (%s, "
              "%zu blocks)\n",
              s.name.c_str(), s.ranks, s.chunks(), s.chunks() == 1 ? "" : "s", s.microbatches,
              static_cast<long long>(p.microbatch_samples), p.model.c_str(), p.blocks.size());
  std::printf("partition (%s):\n", p.manual_split ? "parallel.pipeline.split" : "automatic");
  for (size_t i = 0; i < p.partition.stages.size(); ++i) {
    const auto& stage = p.partition.stages[i];
    const auto& first = p.blocks[static_cast<size_t>(stage.first_block)];
    const auto& last = p.blocks[static_cast<size_t>(stage.first_block + stage.blocks - 1)];
    const auto& cost = p.stage_costs[i];
    std::printf(
        "  stage %zu on rank %d: %d block%s %s..%s  forward %.2f ms, backward %.2f ms (input "
        "%.2f + weight %.2f), send %.3f ms, memory %.1f MB (activations of %d micro-batch%s)\n",
        i, s.stage_rank[i], stage.blocks, stage.blocks == 1 ? "" : "s", first.name.c_str(),
        last.name.c_str(), ms(cost.forward_seconds),
        ms(cost.backward_input_seconds + cost.backward_weight_seconds),
        ms(cost.backward_input_seconds), ms(cost.backward_weight_seconds), ms(cost.send_seconds),
        mb(stage.memory_bytes), p.simulation.peak_in_flight[i],
        p.simulation.peak_in_flight[i] == 1 ? "" : "es");
  }
  std::printf("slowest stage %.2f ms; uniform split %.2f ms, parameter-balanced %.2f ms\n",
              ms(p.partition.slowest_seconds()), ms(p.uniform_slowest_seconds),
              ms(p.parameter_balanced_slowest_seconds));
  std::printf("simulated step %.1f ms, bubble %.1f%%, %.1f samples/s per pipeline\n",
              ms(p.simulation.step_seconds), 100 * p.simulation.bubble_fraction,
              p.samples_per_second());
  if (p.better_microbatches > 0) {
    std::printf("bubble %.0f%%: raise parallel.pipeline.microbatches to %lld (simulated bubble "
                "%.1f%%, step %.1f ms; micro-batches of %lld samples)\n",
                100 * p.simulation.bubble_fraction, static_cast<long long>(p.better_microbatches),
                100 * p.better_bubble, ms(p.better_step_seconds),
                static_cast<long long>(p.microbatch_samples * s.microbatches /
                                       p.better_microbatches));
  }
}

// The simulated step as a Chrome trace: a process per rank, a slice per action.
std::string trace_json(const train::PipelinePlan& p) {
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
  return {sub, [args] {
            const Config config = load_config(args->config_paths, args->overrides);
            const train::PipelinePlan plan = train::plan_pipeline(config, detect_topology());
            print_plan(plan);
            if (!args->trace.empty()) {
              train::replace_file_atomically(args->trace, trace_json(plan));
              std::printf("trace: %s\n", args->trace.c_str());
            }
            if (!args->csv.empty()) {
              train::replace_file_atomically(args->csv,
                                             parallel::pipeline::schedule_to_csv(plan.schedule));
              std::printf("schedule: %s\n", args->csv.c_str());
            }
            return 0;
          }};
}

}  // namespace loom::cli
