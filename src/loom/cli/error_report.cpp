#include "loom/cli/error_report.h"

#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/settings.h"

namespace loom::cli {
namespace {

const char* kind_of(const std::exception& error) {
  if (dynamic_cast<const ConfigError*>(&error)) return "config";
  if (dynamic_cast<const DataError*>(&error)) return "data";
  if (dynamic_cast<const CommError*>(&error)) return "comm";
  if (dynamic_cast<const TimeoutError*>(&error)) return "timeout";
  return "runtime";
}

}  // namespace

int rank_from_environment() {
  for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}) {
    if (const char* value = std::getenv(name); value && *value) return std::atoi(value);
  }
  return 0;
}

void report_error(const std::string& command, int exit_code, const std::exception& error) {
  std::string path;
  try {
    path = setting("LOOM_ERROR_FILE");
  } catch (const std::exception&) {
    return;
  }
  // Under torchrun, its agent names a file per rank and prints the "message" found there in its
  // failure summary (with "timestamp", seconds since the epoch) instead of "<N/A>".
  if (const char* torchrun = std::getenv("TORCHELASTIC_ERROR_FILE"); path.empty() && torchrun) {
    path = torchrun;
  }
  if (path.empty()) return;
  const int rank = rank_from_environment();
  if (const size_t at = path.find("{rank}"); at != std::string::npos) {
    path.replace(at, 6, std::to_string(rank));
  }
  nlohmann::ordered_json report = {
      {"command", command},     {"exit_code", exit_code},
      {"kind", kind_of(error)}, {"message", error.what()},
      {"rank", rank},           {"fields", nlohmann::ordered_json::object()},
      {"timestamp", static_cast<std::int64_t>(std::time(nullptr))}};
  if (const auto* loom_error = dynamic_cast<const Error*>(&error)) {
    for (const auto& [name, value] : loom_error->fields()) report["fields"][name] = value;
  }
  try {
    replace_file_atomically(path, report.dump() + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: could not write LOOM_ERROR_FILE '%s': %s\n", path.c_str(),
                 e.what());
  }
}

}  // namespace loom::cli
