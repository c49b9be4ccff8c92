// Reading what `loom` commands report for machines rather than people: the JSON object a
// `--json` command prints, a JSON file, and a run's metrics.jsonl records of one type.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tools/test_support.h"

namespace loom::test {

// The last line of `output` that holds a JSON object (a `--json` command prints one as its last
// line of stdout; log lines on stderr may come before or after it). Null, with a GoogleTest
// failure showing the output, when there is none.
inline nlohmann::json json_line(const std::string& output) {
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.front() == '{') last = line;
  }
  if (last.empty()) {
    ADD_FAILURE() << "no JSON line in:\n" << output;
    return nullptr;
  }
  return nlohmann::json::parse(last);
}

inline nlohmann::json json_file(const std::string& path) {
  return nlohmann::json::parse(read_text(path));
}

// A `loom` command run with LOOM_ERROR_FILE set, and the error report it left there (null when
// it left none): tests assert on its exit_code, kind and fields (a configuration error's key),
// not on the message's words.
struct ReportedRun {
  CommandResult result;
  nlohmann::json error;
};

inline ReportedRun run_loom_reporting(const std::string& args, const std::string& env = "") {
  TempDir dir;
  const std::string path = dir / "error.json";
  ReportedRun run;
  run.result = run_loom(args, "LOOM_ERROR_FILE=" + path + " " + env);
  std::ifstream file(path);
  if (file) run.error = nlohmann::json::parse(file);
  return run;
}

// RUN/metrics.jsonl's records whose "type" is `type`, in order.
inline std::vector<nlohmann::json> metrics_records(const std::string& run,
                                                   const std::string& type) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(read_text(run + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    nlohmann::json record = nlohmann::json::parse(line);
    if (record.value("type", "") == type) out.push_back(std::move(record));
  }
  return out;
}

}  // namespace loom::test
