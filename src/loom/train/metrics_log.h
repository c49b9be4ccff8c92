// metrics.jsonl: one JSON object per line, flushed as written so a killed run keeps its
// history. Appends when resuming.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace loom::train {

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append);
  void write(const nlohmann::ordered_json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace loom::train
