#include "loom/data/synthetic_images.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/core/rng.h"
#include "loom/data/image_codec.h"

namespace fs = std::filesystem;

namespace loom::data {
namespace {

at::Tensor upsample(const at::Tensor& coarse, int height, int width) {
  return at::upsample_bilinear2d(coarse.unsqueeze(0), {height, width}, false).squeeze(0);
}

// One image: its class's colour field, a per-image field, and fine noise, as uint8 HWC.
at::Tensor make_image(const SyntheticFolderSpec& spec, int64_t index, int64_t label) {
  // A class looks the same whatever the seed, so folders written with different seeds are
  // train and validation splits of one task; the seed varies the individual images.
  at::Generator class_gen =
      at::make_generator<at::CPUGeneratorImpl>(hash_key({3, static_cast<uint64_t>(label)}));
  at::Generator image_gen = at::make_generator<at::CPUGeneratorImpl>(
      hash_key({spec.seed, 5, static_cast<uint64_t>(index)}));
  at::Tensor field = upsample(at::rand({3, 5, 5}, class_gen), spec.height, spec.width).mul_(0.6);
  field.add_(upsample(at::rand({3, 12, 12}, image_gen), spec.height, spec.width).mul_(0.3));
  field.add_(at::rand({3, spec.height, spec.width}, image_gen).mul_(0.1));
  return field.mul_(255).round_().clamp_(0, 255).to(at::kByte).permute({1, 2, 0}).contiguous();
}

}  // namespace

int64_t write_synthetic_image_folder(const std::string& root, const SyntheticFolderSpec& spec) {
  int64_t total = 0;
  for (int64_t c = 0; c < spec.classes; ++c) {
    char name[32];
    std::snprintf(name, sizeof name, "class_%03lld", static_cast<long long>(c));
    fs::create_directories(fs::path(root) / name);
  }
  for (int64_t i = 0; i < spec.count; ++i) {
    const int64_t label = i % spec.classes;
    char name[64];
    std::snprintf(name, sizeof name, "class_%03lld/img_%06lld.jpg", static_cast<long long>(label),
                  static_cast<long long>(i));
    const std::string path = (fs::path(root) / name).string();
    const std::string bytes = encode_jpeg(make_image(spec, i, label), spec.quality);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error("synth-images: writing '" + path + "' failed");
    total += static_cast<int64_t>(bytes.size());
  }
  return total;
}

}  // namespace loom::data
