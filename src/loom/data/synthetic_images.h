// Writes an ImageNet-like JPEG folder for tests and benchmarks (`loom data synth-images`):
// ROOT/class_NNN/img_NNNNNN.jpg, smooth class-specific colour fields with per-image variation
// (a class looks alike for every seed: write validation splits with another seed)
// and mild noise, so files compress like photographs (~40 KB at 400x350, quality 90).
// The same seed always writes the same bytes.
#pragma once

#include <cstdint>
#include <string>

namespace loom::data {

struct SyntheticFolderSpec {
  int64_t count = 1000;
  int64_t classes = 10;
  int width = 400, height = 350;
  int quality = 90;
  uint64_t seed = 0;
};

// Returns the total bytes written. Throws Error naming the path on I/O failure.
int64_t write_synthetic_image_folder(const std::string& root, const SyntheticFolderSpec& spec);

}  // namespace loom::data
