// What a data set holds, for `loom data inspect`: samples per class, image sizes, and the files
// that cannot be used with why. Reads every sample; parses headers only unless asked to decode
// (which also finds damage inside the compressed data), on several threads.
#pragma once

#include <array>
#include <map>
#include <string>
#include <vector>

#include "loom/data/dataset.h"
#include "loom/data/sample_error.h"

namespace loom::data {

struct DatasetReport {
  int64_t samples = 0;
  std::vector<int64_t> per_class;  // by label
  // Images by their longer side: up to 64, 128, 256, 512, 1024, 2048 pixels, and larger.
  static constexpr std::array<int, 6> kSideBounds = {64, 128, 256, 512, 1024, 2048};
  std::array<int64_t, 7> by_longer_side{};
  int min_width = 0, max_width = 0, min_height = 0, max_height = 0;
  std::array<int64_t, 4> bad{};                                // by SampleFault
  std::vector<std::pair<std::string, std::string>> bad_files;  // key, reason (the first ones)
  int64_t bad_total() const { return bad[0] + bad[1] + bad[2] + bad[3]; }
};

// `max_pixels` as in data.max_pixels (0 = no limit); `decode` decodes every image fully.
DatasetReport inspect_dataset(const Dataset& dataset, int threads, bool decode, int64_t max_pixels,
                              size_t max_listed_bad = 20);

}  // namespace loom::data
