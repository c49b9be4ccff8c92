// `loom report RUN_DIR [--out FILE]`: the run's HTML report (default RUN_DIR/report.html).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/cli/commands.h"
#include "loom/core/error.h"
#include "loom/profile/report.h"

namespace loom::cli {
namespace {

// Files a run may lack (an interrupted run has no summary yet) read as empty.
std::string read_if_present(const std::string& path) {
  return std::filesystem::exists(path) ? read_user_file(path, "RUN_DIR") : std::string();
}

int run_report(const std::string& run_dir, std::string out) {
  profile::ReportInput input;
  input.summary_json = read_if_present(run_dir + "/summary.json");
  if (input.summary_json.empty()) {
    throw ConfigError("RUN_DIR: no summary.json in '" + run_dir +
                      "' (is it a finished `loom train` run?)");
  }
  input.metrics_jsonl = read_if_present(run_dir + "/metrics.jsonl");
  input.config_yaml = read_if_present(run_dir + "/config.yaml");
  input.run_name = run_dir;
  if (out.empty()) out = run_dir + "/report.html";
  const std::string page = profile::render_report(input);
  std::ofstream file(out);
  if (!(file << page)) throw Error("report: cannot write '" + out + "'");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "report", "Write a run's HTML report: step-time breakdown, throughput, loss, findings");
  sub->add_option("run_dir", *run_dir, "Output directory of a `loom train` run")->required();
  sub->add_option("--out", *out, "Where to write it (default: RUN_DIR/report.html)");
  return {sub, [run_dir, out] { return run_report(*run_dir, *out); }};
}

}  // namespace loom::cli
