#include "loom/profile/report.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/core/error.h"
#include "loom/profile/report_settings.h"

namespace loom::profile {

// The page's markup, style and script. The script reads the embedded data and draws each chart
// as SVG, with labelled ticks on both axes; it marks <body data-charts="N" data-overlaps="M">
// with the number drawn and the texts it finds covering one another, and each chart's <svg>
// with its plot area and the points it drew (data-plot, data-points, data-outside), which the
// test reads back.
extern const char* const kReportPage;

namespace {

// JSON inside <script> must not contain "</" (it would end the element).
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += json[i];
    }
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string render_report(const ReportInput& input) {
  nlohmann::json data;
  try {
    data["summary"] = nlohmann::json::parse(input.summary_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error("report: summary.json is not JSON: " + std::string(e.what()));
  }
  data["records"] = nlohmann::json::array();
  std::istringstream lines(input.metrics_jsonl);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    try {
      data["records"].push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      throw Error("report: metrics.jsonl line " + std::to_string(number) + " is not JSON");
    }
  }
  // The settings that apply to the run's model, data and layout; the rest only counted.
  const RunSettings settings = run_settings(input.config_yaml);
  data["settings"] = nlohmann::json::array();
  for (const ConfigSetting& s : settings.shown) data["settings"].push_back({s.key, s.value});
  data["settings_hidden"] = settings.hidden;
  data["run"] = input.run_name;

  std::string page = kReportPage;
  auto replace = [&](const std::string& marker, const std::string& text) {
    for (auto at = page.find(marker); at != std::string::npos;
         at = page.find(marker, at + text.size())) {
      page.replace(at, marker.size(), text);
    }
  };
  replace("@TITLE@", html_escape(input.run_name));
  replace("@DATA@", script_safe(data.dump()));
  return page;
}

}  // namespace loom::profile
