#include "loom/data/dataset_report.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <thread>

#include "loom/data/image_codec.h"

namespace loom::data {
namespace {

struct Seen {
  int width = 0, height = 0;
  int64_t label = 0;
};

// Size and label of one sample; throws SampleError.
Seen look_at(const Sample& s, bool decode, int64_t max_pixels) {
  if (s.pixels.defined()) {
    return {static_cast<int>(s.pixels.size(1)), static_cast<int>(s.pixels.size(0)), s.label};
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(s.bytes.data());
  const ImageHeader h = read_image_header(bytes, s.bytes.size(), s.key);
  if (max_pixels > 0 && int64_t{h.width} * h.height > max_pixels) {
    throw SampleError(SampleFault::kTooLarge, "image '" + s.key + "': " + std::to_string(h.width) +
                                                  "x" + std::to_string(h.height) +
                                                  " pixels exceed data.max_pixels");
  }
  if (decode) {
    DecodeOptions options;
    options.max_pixels = max_pixels;
    decode_image(bytes, s.bytes.size(), options, s.key);
  }
  return {h.width, h.height, s.label};
}

}  // namespace

DatasetReport inspect_dataset(const Dataset& dataset, int threads, bool decode, int64_t max_pixels,
                              size_t max_listed_bad) {
  DatasetReport r;
  r.samples = dataset.size();
  r.per_class.assign(dataset.class_names().size(), 0);
  r.min_width = r.min_height = INT_MAX;
  std::mutex mutex;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < r.samples; i = next++) {
      try {
        const Seen s = look_at(dataset.read(i), decode, max_pixels);
        const int side = std::max(s.width, s.height);
        const auto bucket = std::lower_bound(DatasetReport::kSideBounds.begin(),
                                             DatasetReport::kSideBounds.end(), side) -
                            DatasetReport::kSideBounds.begin();
        std::lock_guard<std::mutex> lock(mutex);
        ++r.by_longer_side[static_cast<size_t>(bucket)];
        if (s.label >= 0 && s.label < static_cast<int64_t>(r.per_class.size())) {
          ++r.per_class[static_cast<size_t>(s.label)];
        }
        r.min_width = std::min(r.min_width, s.width);
        r.max_width = std::max(r.max_width, s.width);
        r.min_height = std::min(r.min_height, s.height);
        r.max_height = std::max(r.max_height, s.height);
      } catch (const SampleError& e) {
        std::lock_guard<std::mutex> lock(mutex);
        ++r.bad[static_cast<size_t>(e.fault())];
        r.bad_files.emplace_back(e.what(), fault_name(e.fault()));
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (r.min_width == INT_MAX) r.min_width = r.min_height = 0;
  std::sort(r.bad_files.begin(), r.bad_files.end());  // the same listing for any thread count
  if (r.bad_files.size() > max_listed_bad) r.bad_files.resize(max_listed_bad);
  return r;
}

}  // namespace loom::data
