// `loom bench kernels [--json FILE] [--quick] [--threads N]`: Loom's own kernels (blocked causal
// attention, fused AdamW, the input pipeline's resize, blur and normalisation) against torch's
// equivalents, side by side in one process (cli/kernel_comparisons.h). Prints one line a case:
// both medians, torch / Loom (above 1: Loom's is faster) and how far apart the results are.
#include <ATen/Parallel.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/cli/kernel_comparisons.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/cpu_capability.h"
#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/core/torch_build.h"

namespace loom::cli {
namespace {

struct KernelBenchArgs {
  bool quick = false;
  int threads = 0;  // 0: every usable core
  std::string json;
};

bool agrees(const KernelComparison& c) { return c.tolerance < 0 || c.difference <= c.tolerance; }

void print_table(const std::vector<KernelComparison>& cases, const Topology& topology) {
  std::printf("kernels, %d threads, Loom's kernels on %s, torch %s; %s\n", at::get_num_threads(),
              std::string(to_string(cpu_capability())).c_str(), torch_build().version.c_str(),
              describe(topology).c_str());
  std::printf("%-36s %10s %10s %11s  %s\n", "case", "loom ms", "torch ms", "torch/loom",
              "difference");
  for (const auto& c : cases) {
    std::printf("%-36s %10.3f %10.3f %10.2fx  %.3g %s", c.name.c_str(), 1e3 * c.loom_seconds,
                1e3 * c.torch_seconds, c.torch_seconds / c.loom_seconds, c.difference,
                c.difference_unit.c_str());
    if (c.differing_fraction >= 0) std::printf(" (%.2f%% of values)", 100 * c.differing_fraction);
    if (c.tolerance < 0) std::printf(", not checked");
    if (!agrees(c)) std::printf(", ABOVE %.3g", c.tolerance);
    std::printf("\n");
  }
}

void write_json(const std::vector<KernelComparison>& cases, const KernelBenchOptions& options,
                const std::string& path) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    nlohmann::ordered_json row = {{"name", c.name},
                                  {"group", c.group},
                                  {"torch", c.torch},
                                  {"loom_seconds", c.loom_seconds},
                                  {"torch_seconds", c.torch_seconds},
                                  {"torch_over_loom", c.torch_seconds / c.loom_seconds},
                                  {"repeats", c.repeats},
                                  {"difference", c.difference},
                                  {"difference_unit", c.difference_unit},
                                  {"tolerance", c.tolerance},
                                  {"agrees", agrees(c)}};
    if (c.differing_fraction >= 0) row["differing_fraction"] = c.differing_fraction;
    if (!c.note.empty()) row["note"] = c.note;
    rows.push_back(row);
  }
  std::ofstream(path)
      << nlohmann::ordered_json{{"threads", at::get_num_threads()},
                                {"cpu_capability", std::string(to_string(cpu_capability()))},
                                {"torch", torch_build().version},
                                {"images", options.images},
                                {"warmup", options.warmup},
                                {"cases", rows}}
             .dump(2)
      << "\n";
}

int run_kernel_bench(const KernelBenchArgs& args) {
  const Topology topology = detect_topology();
  // As `loom train` runs by default: buffers reused between calls.
  use_configured_allocator("caching", topology.memory_bytes);
  at::set_num_threads(args.threads > 0 ? args.threads : topology.usable_cores);
  KernelBenchOptions options;
  if (args.quick) {
    options.warmup = 1;
    options.repeats = 3;
    options.images = 8;
  }
  std::vector<KernelComparison> cases = compare_attention(options);
  for (auto& c : compare_adamw(options)) cases.push_back(std::move(c));
  for (auto& c : compare_image_kernels(options)) cases.push_back(std::move(c));
  print_table(cases, topology);
  if (!args.json.empty()) write_json(cases, options, args.json);
  return 0;
}

}  // namespace

Command add_bench_kernels_command(CLI::App& bench) {
  auto args = std::make_shared<KernelBenchArgs>();
  CLI::App* sub = bench.add_subcommand(
      "kernels", "Loom's attention, AdamW and image kernels against torch's, side by side");
  sub->add_flag("--quick", args->quick, "Fewer repetitions and images (a smoke run)");
  sub->add_option("--threads", args->threads, "Intra-op threads (default: every usable core)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--json", args->json, "Also write the cases to this JSON file");
  return {sub, [args] { return run_kernel_bench(*args); }};
}

}  // namespace loom::cli
