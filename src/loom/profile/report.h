// The HTML report of a run (`loom report RUN_DIR`): one self-contained file, no network. It
// embeds the run's summary, metrics records and configuration as JSON, and a small script draws
// the charts from them in the browser: the step-time breakdown over the run (stacked by phase),
// throughput, loss with test accuracy, the layout and mesh, the machine, the settings that apply
// to the model and data trained (report_settings.h) and the advisor's findings.
#pragma once

#include <string>

namespace loom::profile {

struct ReportInput {
  std::string run_name;
  std::string summary_json;   // summary.json
  std::string metrics_jsonl;  // metrics.jsonl (one record per line)
  std::string config_yaml;    // config.yaml
};

// The page. Throws Error when the summary or a metrics line is not JSON, or the configuration
// not YAML.
std::string render_report(const ReportInput& input);

}  // namespace loom::profile
