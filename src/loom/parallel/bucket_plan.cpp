#include "loom/parallel/bucket_plan.h"

#include <map>

namespace loom::parallel {

BucketLimits bucket_limits(double first_mb, double cap_mb) {
  return {static_cast<std::size_t>(first_mb * (1 << 20)),
          static_cast<std::size_t>(cap_mb * (1 << 20))};
}

std::vector<std::vector<int>> plan_buckets(const std::vector<GradientInfo>& gradients,
                                           const std::vector<int>& order,
                                           const BucketLimits& limits) {
  std::vector<std::vector<int>> buckets;
  // One open bucket per element type, so mixed-precision models still get full buckets.
  struct Open {
    int bucket = -1;
    std::size_t bytes = 0;
  };
  std::map<c10::ScalarType, Open> open;
  for (int index : order) {
    const auto& g = gradients[index];
    const std::size_t bytes = static_cast<std::size_t>(g.numel) * c10::elementSize(g.dtype);
    Open& current = open[g.dtype];
    const std::size_t limit = current.bucket == 0 ? limits.first_bytes : limits.cap_bytes;
    if (current.bucket < 0 || (current.bytes > 0 && current.bytes + bytes > limit)) {
      current = {static_cast<int>(buckets.size()), 0};
      buckets.emplace_back();
    }
    buckets[current.bucket].push_back(index);
    current.bytes += bytes;
  }
  return buckets;
}

}  // namespace loom::parallel
