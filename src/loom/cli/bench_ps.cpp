// `loom bench ps --servers K [--model resnet18] [--link-gbit G] [--json FILE]`: parameter servers
// against ring all-reduce on one model's gradients, run by every rank of
// `loom launch --nproc-per-node N --servers K -- loom bench ps --servers K`. Worker rank 0 prints
// both step times, their ratio, and what the bandwidth arithmetic predicts for links of G Gbit/s.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/comm/world_info.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/parallel/ps/ps_benchmark.h"

namespace loom::cli {
namespace {

struct PsBenchArgs {
  parallel::ps::PsBenchOptions options;
  double link_gbit = 0;
  std::string json;
};

// Each server's bytes and times per step (the warm-up step included).
nlohmann::ordered_json servers_json(const parallel::ps::PsBenchResult& r) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const parallel::ServerLoad& load : r.server_loads) {
    const double steps = std::max<double>(1, static_cast<double>(load.steps));
    rows.push_back({{"bytes_in", static_cast<double>(load.bytes_in) / steps},
                    {"bytes_out", static_cast<double>(load.bytes_out) / steps},
                    {"sum_seconds", load.sum_seconds / steps},
                    {"active_seconds", load.active_seconds / steps},
                    {"busy_seconds", load.busy_seconds / steps}});
  }
  return rows;
}

int run_ps_bench(const PsBenchArgs& args) {
  const auto world = comm::world_from_environment();
  if (world.world < 2) {
    throw ConfigError(
        "bench ps: needs workers and servers; run it under `loom launch --nproc-per-node N "
        "--servers K -- loom bench ps --servers K`");
  }
  // As `loom train` and `loom ps-server` run by default: buffers reused between steps.
  use_configured_allocator("caching", detect_topology().memory_bytes);
  auto rendezvous = comm::Rendezvous::connect(world, std::chrono::seconds(120));
  const auto r = parallel::ps::run_ps_benchmark(rendezvous, args.options);
  if (world.rank != 0) return 0;
  const double n = r.workers, k = r.servers, m = static_cast<double>(r.gradient_bytes);
  // Bytes per second of one host's link; the arithmetic of docs/parameter_servers.md.
  const double b = args.link_gbit * 1e9 / 8;
  const double ring_model = b > 0 ? 2 * (n - 1) / n * m / b : 0;
  const double ps_model = b > 0 ? std::max(m / b, n * m / (k * b)) : 0;
  std::printf(
      "bench ps: %s gradients, %.1f MB in %d buckets, %d parts over %d servers; %d workers\n",
      args.options.model.c_str(), m / 1e6, r.buckets, r.parts, r.servers, r.workers);
  std::printf("  ring all-reduce  %8.1f ms", 1e3 * r.ring_seconds);
  if (b > 0) std::printf("   (arithmetic: 2(n-1)/n*M/B = %.1f ms)", 1e3 * ring_model);
  std::printf("\n  parameter servers %7.1f ms", 1e3 * r.ps_seconds);
  if (b > 0) std::printf("   (arithmetic: max(M/B, n*M/(k*B)) = %.1f ms)", 1e3 * ps_model);
  for (size_t s = 0; s < r.server_loads.size(); ++s) {
    const auto& load = r.server_loads[s];
    const double steps = std::max<double>(1, static_cast<double>(load.steps));
    std::printf(
        "%s server %zu: %.1f MB in, %.0f ms busy (CPU), %.0f ms active, %.0f ms summing "
        "per step",
        s == 0 ? "\n   " : ";", s, static_cast<double>(load.bytes_in) / steps / 1e6,
        1e3 * load.busy_seconds / steps, 1e3 * load.active_seconds / steps,
        1e3 * load.sum_seconds / steps);
  }
  std::printf("\n  ring / servers: %.2fx", r.ring_seconds / r.ps_seconds);
  if (b > 0) std::printf(" (arithmetic %.2fx)", ring_model / ps_model);
  std::printf("\n");
  if (!args.json.empty()) {
    nlohmann::ordered_json j = {
        {"model", args.options.model},  {"workers", r.workers},
        {"servers", r.servers},         {"gradient_bytes", r.gradient_bytes},
        {"buckets", r.buckets},         {"parts", r.parts},
        {"link_gbit", args.link_gbit},  {"ring_seconds", r.ring_seconds},
        {"ps_seconds", r.ps_seconds},   {"ring_model_seconds", ring_model},
        {"ps_model_seconds", ps_model}, {"ring_steps", r.ring_steps},
        {"ps_steps", r.ps_steps},       {"servers_per_step", servers_json(r)}};
    std::ofstream(args.json) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

Command add_bench_ps_command(CLI::App& bench) {
  auto args = std::make_shared<PsBenchArgs>();
  CLI::App* sub = bench.add_subcommand(
      "ps",
      "Parameter servers vs ring all-reduce on a model's gradients (under loom launch "
      "--servers K)");
  sub->add_option("--servers", args->options.servers, "Server ranks (the last ones)")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("--model", args->options.model,
                  "Whose gradients: resnet18, resnet50, vit_tiny, "
                  "cnn, mlp")
      ->capture_default_str();
  sub->add_option("--part-mb", args->options.part_mb, "Part size (parallel.ps.part_mb)")
      ->capture_default_str();
  sub->add_option("--repeats", args->options.repeats, "Timed steps of each kind")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--backend", args->options.backend, "tcp, shm or auto")->capture_default_str();
  sub->add_option("--link-gbit", args->link_gbit,
                  "Each host's link in Gbit/s, for the predicted times (0: none)");
  sub->add_option("--json", args->json, "Also write the result to this JSON file (worker rank 0)");
  return {sub, [args] { return run_ps_bench(*args); }};
}

}  // namespace loom::cli
