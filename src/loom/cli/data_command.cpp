// `loom data ...`: tools for data sets. `synth-images DIR` writes an ImageNet-like JPEG folder.
#include <cstdio>
#include <string>

#include "loom/cli/commands.h"
#include "loom/data/image_folder.h"
#include "loom/data/synthetic_images.h"

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
  return {sub, [synth, s] { return s->parsed() ? run_synth(*synth) : 2; }};
}

}  // namespace loom::cli
