// `loom bench comm [--json FILE]`: all-reduce time of shm vs tcp on the ranks of a job, meant to
// be started by `loom launch --nproc-per-node N -- loom bench comm`. Rank 0 prints the table.
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
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MB";
  return std::to_string(bytes >> 10) + " KB";
}

void print_table(const comm::CommBenchResult& result) {
  std::printf("all-reduce, %d ranks; single-thread memcpy %.1f GB/s\n", result.world,
              result.memcpy_gbps);
  std::printf("%-9s %7s %12s %10s %12s %10s %8s %9s\n", "dtype", "size", "shm us", "shm GB/s",
              "tcp us", "tcp GB/s", "speedup", "%memcpy");
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
    const auto& shm = by_backend["shm"];
    const auto& tcp = by_backend["tcp"];
    std::printf("%-9s %7s %12.1f %10.2f %12.1f %10.2f %7.1fx %8.0f%%\n",
                c10::toString(static_cast<c10::ScalarType>(key.first)),
                size_text(key.second).c_str(), shm.median_seconds * 1e6, shm.bus_gbps,
                tcp.median_seconds * 1e6, tcp.bus_gbps, tcp.median_seconds / shm.median_seconds,
                100 * shm.bus_gbps / result.memcpy_gbps);
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
      bench->add_subcommand("comm", "All-reduce time, shm vs tcp, on the ranks of a loom launch");
  auto json = std::make_shared<std::string>();
  auto quick = std::make_shared<bool>(false);
  sub->add_option("--json", *json, "Also write the rows to this JSON file (rank 0)");
  sub->add_flag("--quick", *quick, "Fewer sizes and repetitions (a smoke run)");
  const Command pipeline = add_bench_pipeline_command(*bench);
  const Command ps = add_bench_ps_command(*bench);
  return {bench, [sub, json, quick, pipeline, ps] {
            if (pipeline.sub->parsed()) return pipeline.run();
            if (ps.sub->parsed()) return ps.run();
            const auto world = comm::world_from_environment();
            if (world.world < 2) {
              throw ConfigError(
                  "bench comm: needs at least 2 ranks; run it under "
                  "`loom launch --nproc-per-node 2 -- loom bench comm`");
            }
            auto rendezvous = comm::Rendezvous::connect(world, std::chrono::seconds(60));
            comm::CommBenchOptions options;
            if (*quick) {
              options.sizes_bytes = {4 << 10, 1 << 20};
              options.seconds_per_case = 0.02;
              options.min_repeats = 3;
            }
            const auto result = comm::run_comm_benchmark(rendezvous, options);
            if (world.rank == 0) {
              print_table(result);
              if (!json->empty()) write_json(result, *json);
            }
            return 0;
          }};
}

}  // namespace loom::cli
