// `loom bench comm`: all-reduce time of the backends (shm and tcp unless --backends names
// others) on the ranks of a job, meant to be started by
// `loom launch --nproc-per-node N -- loom bench comm`, or by one `loom launch` per host to time
// tcp between hosts. Rank 0 prints the table.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/comm/comm_benchmark.h"
#include "loom/comm/world_info.h"
#include "loom/core/error.h"

namespace loom::cli {
namespace {

std::string size_text(std::int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MB";
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KB";
  return std::to_string(bytes) + " B";
}

// One line per (dtype, size), with a median time and bus bandwidth per backend; with shm and
// tcp both timed, how many times faster shm is, and shm's bandwidth against one memcpy.
void print_table(const comm::CommBenchResult& result, const std::vector<std::string>& backends) {
  std::printf("all-reduce, %d ranks; single-thread memcpy %.1f GB/s\n", result.world,
              result.memcpy_gbps);
  const bool both = std::count(backends.begin(), backends.end(), "shm") &&
                    std::count(backends.begin(), backends.end(), "tcp");
  std::printf("%-9s %7s", "dtype", "size");
  for (const auto& backend : backends) {
    std::printf(" %12s %10s", (backend + " us").c_str(), (backend + " GB/s").c_str());
  }
  if (both) std::printf(" %8s %9s", "speedup", "%memcpy");
  std::printf("\n");
  // Rows come in (dtype, size) groups of one row per backend.
  std::map<std::pair<int, std::int64_t>, std::map<std::string, comm::CommBenchRow>> cases;
  std::vector<std::pair<int, std::int64_t>> order;
  for (const auto& row : result.rows) {
    const auto key = std::make_pair(static_cast<int>(row.dtype), row.bytes);
    if (!cases.count(key)) order.push_back(key);
    cases[key][row.backend] = row;
  }
  for (const auto& key : order) {
    auto& by_backend = cases[key];
    std::printf("%-9s %7s", c10::toString(static_cast<c10::ScalarType>(key.first)),
                size_text(key.second).c_str());
    for (const auto& backend : backends) {
      std::printf(" %12.1f %10.2f", by_backend[backend].median_seconds * 1e6,
                  by_backend[backend].bus_gbps);
    }
    if (both) {
      const auto& shm = by_backend["shm"];
      std::printf(" %7.1fx %8.0f%%", by_backend["tcp"].median_seconds / shm.median_seconds,
                  100 * shm.bus_gbps / result.memcpy_gbps);
    }
    std::printf("\n");
  }
}

void write_json(const comm::CommBenchResult& result, const std::string& path) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : result.rows) {
    rows.push_back({{"backend", row.backend},
                    {"dtype", c10::toString(row.dtype)},
                    {"bytes", row.bytes},
                    {"median_seconds", row.median_seconds},
                    {"repeats", row.repeats},
                    {"bus_gbps", row.bus_gbps}});
  }
  std::ofstream(path) << nlohmann::json{{"world", result.world},
                                        {"memcpy_gbps", result.memcpy_gbps},
                                        {"rows", rows}}
                             .dump(2)
                      << "\n";
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of Loom's parts");
  bench->require_subcommand(1);
  CLI::App* sub =
      bench->add_subcommand("comm", "All-reduce time of the backends on the ranks of a job");
  auto json = std::make_shared<std::string>();
  auto quick = std::make_shared<bool>(false);
  auto options = std::make_shared<comm::CommBenchOptions>();
  sub->add_option("--json", *json, "Also write the rows to this JSON file (rank 0)");
  sub->add_flag("--quick", *quick, "Fewer sizes and repetitions (a smoke run)");
  sub->add_option("--backends", options->backends,
                  "Backends to time, comma-separated (tcp alone between hosts)")
      ->delimiter(',')
      ->check(CLI::IsMember({"shm", "tcp"}))
      ->capture_default_str();
  auto sizes = std::make_shared<std::vector<std::int64_t>>();
  sub->add_option("--sizes", *sizes,
                  "Message sizes, comma-separated (4K, 4M, 64M: powers of 1024; default 4K to "
                  "64M)")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  auto dtypes = std::make_shared<std::vector<std::string>>();
  sub->add_option("--dtypes", *dtypes, "Element types, comma-separated (default both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  const Command pipeline = add_bench_pipeline_command(*bench);
  const Command ps = add_bench_ps_command(*bench);
  const Command kernels = add_bench_kernels_command(*bench);
  return {bench, [sub, json, quick, options, sizes, dtypes, pipeline, ps, kernels] {
            if (pipeline.sub->parsed()) return pipeline.run();
            if (ps.sub->parsed()) return ps.run();
            if (kernels.sub->parsed()) return kernels.run();
            for (const auto bytes : *sizes) {
              // Every element type divides it: a whole number of 4-byte elements.
              if (bytes <= 0 || bytes % 4 != 0) {
                throw ConfigError("bench comm: --sizes " + std::to_string(bytes) +
                                      ": a size is a positive multiple of 4 bytes",
                                  {{"key", "--sizes"}});
              }
            }
            const auto world = comm::world_from_environment();
            if (world.world < 2) {
              throw ConfigError(
                  "bench comm: needs at least 2 ranks; run it under "
                  "`loom launch --nproc-per-node 2 -- loom bench comm`");
            }
            auto rendezvous = comm::Rendezvous::connect(world, std::chrono::seconds(60));
            if (*quick) {
              options->sizes_bytes = {4 << 10, 1 << 20};
              options->seconds_per_case = 0.02;
              options->min_repeats = 3;
            }
            if (!sizes->empty()) options->sizes_bytes = *sizes;
            if (!dtypes->empty()) {
              options->dtypes.clear();
              for (const auto& name : *dtypes) {
                options->dtypes.push_back(name == "float32" ? c10::ScalarType::Float
                                                            : c10::ScalarType::BFloat16);
              }
            }
            const auto result = comm::run_comm_benchmark(rendezvous, *options);
            if (world.rank == 0) {
              print_table(result, options->backends);
              if (!json->empty()) write_json(result, *json);
            }
            return 0;
          }};
}

}  // namespace loom::cli
