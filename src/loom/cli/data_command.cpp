// `loom data ...`: tools for data sets.
//   synth-images DIR     writes an ImageNet-like JPEG folder
//   bench [CONFIG]       images/s of the input pipeline alone (decode, transforms, feeder);
//                        --decode-only: full-image decode rate of the same files, same threads
//   inspect [CONFIG]     samples per class, image sizes, bad files (data_inspect.cpp)
//   tokenize CORPUS...   token shards and a SentencePiece tokenizer (data_tokenize.cpp)
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/data/feeder.h"
#include "loom/data/image_codec.h"
#include "loom/data/image_folder.h"
#include "loom/data/loader.h"
#include "loom/data/synthetic_images.h"
#include "loom/train/safetensors.h"
#include "loom/train/train_data.h"

namespace loom::cli {
namespace {

struct SynthArgs {
  std::string dir;
  data::SyntheticFolderSpec spec;
};

int run_synth(const SynthArgs& a) {
  const int64_t bytes = data::write_synthetic_image_folder(a.dir, a.spec);
  data::ImageFolder check(a.dir);  // what a loader will see
  std::printf("wrote %lld JPEGs (%dx%d, %lld classes) to %s: %.1f MB, %.1f KB per image\n",
              static_cast<long long>(a.spec.count), a.spec.width, a.spec.height,
              static_cast<long long>(a.spec.classes), a.dir.c_str(), bytes / 1e6,
              bytes / 1e3 / static_cast<double>(a.spec.count));
  return check.size() >= a.spec.count ? 0 : 1;
}

struct BenchArgs {
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  int64_t batches = 20;
  bool decode_only = false;
  bool loader_only = false;
  std::string device = "cpu";
  std::string save;  // safetensors file for the batches read, uint8 as the loader made them
};

using Clock = std::chrono::steady_clock;

double resident_megabytes() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1e6;
}

double peak_resident_megabytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / 1e6;  // ru_maxrss is in KiB
}

// Every file decoded whole, split over the workers: the libjpeg-turbo bound for these files.
double decode_only_rate(const Config& config, int threads, int64_t limit) {
  data::ImageFolder folder(config.data.path);
  const int64_t n = std::min(folder.size(), limit);
  std::atomic<int64_t> next{0};
  std::vector<std::thread> workers;
  const auto start = Clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) {
        data::Sample s = folder.read(i);
        data::decode_image(reinterpret_cast<const uint8_t*>(s.bytes.data()), s.bytes.size(), {},
                           s.key);
      }
    });
  }
  for (auto& w : workers) w.join();
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - start).count();
}

int run_bench(const BenchArgs& a) {
  const Config config = load_run_config(a.config_paths, a.overrides);
  if (a.decode_only && config.data.source != "image_folder") {
    throw ConfigError("config key 'data.source': --decode-only measures image files, got '" +
                      config.data.source + "'");
  }
  const Topology topology = detect_topology();
  const int threads =
      config.data.workers > 0 ? static_cast<int>(config.data.workers) : topology.usable_cores;
  use_configured_allocator(config.runtime.allocator, topology.memory_bytes);
  if (a.decode_only) {
    const double rate = decode_only_rate(config, threads, a.batches * config.data.batch_size);
    std::printf("{\"mode\": \"decode_only\", \"threads\": %d, \"images_per_second\": %.1f}\n",
                threads, rate);
    return 0;
  }
  const at::Device device = data::parse_feed_device(a.device, "--device");
  const double baseline_mb = resident_megabytes();
  train::TrainData data =
      train::load_train_data(config, config.data.batch_size, topology.usable_cores, 0, 1,
                             /*pin_memory=*/device.is_cuda());
  const auto* loader = dynamic_cast<const data::Loader*>(data.train.get());
  data::Feeder feeder(data.stats, at::MemoryFormat::ChannelsLast, device);
  // Batches run on over epoch boundaries, as training reads them.
  const int64_t steps = a.batches + 1;
  const int64_t per_epoch = data.train->steps_per_epoch();
  int64_t images = 0;
  Clock::time_point start;
  at::Tensor input;
  models::NamedTensors saved;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == 1) start = Clock::now();  // the first batch includes thread start-up
    data::Batch batch = data.train->batch(step / per_epoch, step % per_epoch);
    if (!a.save.empty()) {
      const std::string name = "batch" + std::to_string(step);
      saved.emplace_back(name + ".inputs", batch.inputs);
      saved.emplace_back(name + ".targets", batch.targets);
      saved.emplace_back(name + ".indices", batch.indices);
    }
    if (!a.loader_only) {
      input.reset();  // one converted batch alive at a time, not two while the next is made
      input = feeder.to_input(batch.inputs);
    }
    if (step >= 1) images += batch.inputs.size(0);
  }
  // A device feeder returns before its copies and conversions finish: wait for the last one.
  if (input.defined() && !device.is_cpu()) input.flatten()[0].item<float>();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Everything the pipeline holds: prefetched batches, per-thread decode buffers, the feeder's
  // output, the allocator's cache.
  const double budget_mb =
      loader ? static_cast<double>(loader->prefetch_depth() * loader->batch_bytes()) / 1e6 : 0.0;
  std::printf(
      "{\"mode\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"batches\": %lld, "
      "\"images_per_second\": %.1f, \"prefetch_budget_mb\": %.1f, "
      "\"rss_growth_mb\": %.1f}\n",
      a.loader_only ? "loader" : "pipeline", device.str().c_str(), threads,
      static_cast<long long>(steps - 1), images / seconds, budget_mb,
      peak_resident_megabytes() - baseline_mb);
  if (!a.save.empty()) {
    train::write_safetensors(a.save, saved, {{"epoch", "0"}, {"batches", std::to_string(steps)}});
  }
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("data", "Data set tools");
  sub->require_subcommand(1);
  auto synth = std::make_shared<SynthArgs>();
  CLI::App* s = sub->add_subcommand("synth-images", "Write an ImageNet-like JPEG folder");
  s->add_option("dir", synth->dir, "Output folder (class subfolders are created)")->required();
  s->add_option("--count", synth->spec.count, "Images")->check(CLI::PositiveNumber);
  s->add_option("--classes", synth->spec.classes, "Classes")->check(CLI::PositiveNumber);
  s->add_option("--width", synth->spec.width, "Width in pixels")->check(CLI::PositiveNumber);
  s->add_option("--height", synth->spec.height, "Height in pixels")->check(CLI::PositiveNumber);
  s->add_option("--quality", synth->spec.quality, "JPEG quality")->check(CLI::Range(1, 100));
  s->add_option("--seed", synth->spec.seed, "Seed");
  auto bench = std::make_shared<BenchArgs>();
  CLI::App* b = sub->add_subcommand("bench", "Images/s of the input pipeline alone");
  b->add_option("config", bench->config_paths,
                "YAML configuration files (data.source: image_folder); later ones win");
  add_set_option(b, bench->overrides);
  b->add_option("--batches", bench->batches,
                "Batches to time (after one warm-up batch), from epoch 0 on into the next ones")
      ->check(CLI::PositiveNumber);
  b->add_flag("--decode-only", bench->decode_only,
              "Time full-image decoding of the same files instead (the libjpeg-turbo bound)");
  b->add_flag("--loader-only", bench->loader_only,
              "Leave out the feeder's conversion to float: the loader's own rate and memory");
  b->add_option("--device", bench->device,
                "Where the feeder puts batches: cpu, cuda[:N] (pinned batches, asynchronous "
                "copies, normalised on the device) or auto (cuda where a GPU can be used)");
  b->add_option("--save", bench->save,
                "Also write the batches read (the warm-up one too) to this safetensors file: "
                "batch<step>.inputs (uint8 NHWC images or token ids), .targets, .indices; the "
                "trainer sees the same");
  const Command inspect = add_data_inspect_command(*sub);
  const Command tokenize = add_data_tokenize_command(*sub);
  return {sub, [synth, s, bench, b, inspect, tokenize] {
            if (s->parsed()) return run_synth(*synth);
            if (b->parsed()) return run_bench(*bench);
            if (tokenize.sub->parsed()) return tokenize.run();
            return inspect.run();
          }};
}

}  // namespace loom::cli
