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
            const Config config = load_run_config(args->config_paths, args->overrides);
            const train::PipelinePlan plan = train::plan_pipeline(config, detect_topology());
            std::fputs(train::describe_plan(plan).c_str(), stdout);
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
