#include "loom/data/batch_source.h"

#include <string>

#include "loom/core/error.h"

namespace loom::data {

void check_bad_fraction(const LoaderStats& seen, double max_bad_fraction) {
  constexpr int64_t kMinSamplesForBadFraction = 200;
  if (seen.samples < kMinSamplesForBadFraction ||
      static_cast<double>(seen.bad_total()) <= max_bad_fraction * seen.samples) {
    return;
  }
  throw DataError("loader: " + std::to_string(seen.bad_total()) + " of " +
                      std::to_string(seen.samples) + " samples were bad (unreadable " +
                      std::to_string(seen.bad[0]) + ", truncated " + std::to_string(seen.bad[1]) +
                      ", undecodable " + std::to_string(seen.bad[2]) + ", too large " +
                      std::to_string(seen.bad[3]) +
                      "), more than data.max_bad_fraction = " + std::to_string(max_bad_fraction),
                  {{"key", "data.max_bad_fraction"},
                   {"problem", "too_many_bad"},
                   {"value", std::to_string(seen.bad_total())},
                   {"samples", std::to_string(seen.samples)},
                   {"unreadable", std::to_string(seen.bad[0])},
                   {"truncated", std::to_string(seen.bad[1])},
                   {"undecodable", std::to_string(seen.bad[2])},
                   {"too_large", std::to_string(seen.bad[3])},
                   {"allowed", std::to_string(max_bad_fraction)}});
}

int64_t batches_per_epoch(int64_t samples, int64_t batch_size, bool drop_last) {
  const int64_t batches =
      drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
  if (batches == 0) {
    throw ConfigError::at_key("data.batch_size",
                              std::to_string(batch_size) + " is larger than the " +
                                  std::to_string(samples) +
                                  " samples available, so an epoch has no full batch",
                              {{"problem", "larger_than_data"},
                               {"value", std::to_string(batch_size)},
                               {"samples", std::to_string(samples)}});
  }
  return batches;
}

int64_t BatchLayout::bytes() const {
  int64_t input = c10::elementSize(input_dtype), target = sizeof(int64_t);
  for (int64_t d : input_dims) input *= d;
  for (int64_t d : target_dims) target *= d;
  return batch_size * (input + target + static_cast<int64_t>(sizeof(int64_t)));
}

}  // namespace loom::data
