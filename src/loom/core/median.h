// Medians of repeated measurements: a shared machine's noise comes in bursts, and a median
// ignores them where a mean would not.
#pragma once

#include <algorithm>
#include <vector>

namespace loom {

// The middle value; the mean of the two middle values for an even count; 0 for none.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The upper of the two middle values for an even count (a value that was measured); 0 for none.
inline double upper_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

}  // namespace loom
