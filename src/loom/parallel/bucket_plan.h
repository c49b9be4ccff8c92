// How gradients are grouped into all-reduce buckets. Buckets are filled in the order gradients
// are expected to become ready (reverse registration order at first, the observed order after
// the first step), so the first bucket fills early in backward and its all-reduce overlaps the
// rest. The first bucket is small (its all-reduce starts soonest), later ones are capped.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::parallel {

struct BucketLimits {
  std::size_t first_bytes = std::size_t{1} << 20;
  std::size_t cap_bytes = std::size_t{25} << 20;
};

// Limits given in MiB, as parallel.first_bucket_mb / bucket_cap_mb and the Python wrappers take
// them.
BucketLimits bucket_limits(double first_mb, double cap_mb);

struct GradientInfo {
  std::int64_t numel = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// Indices of `gradients` per bucket, taking them in `order`. A bucket holds one element type
// and closes when adding the next gradient would pass its limit (a gradient larger than the
// limit gets a bucket of its own).
std::vector<std::vector<int>> plan_buckets(const std::vector<GradientInfo>& gradients,
                                           const std::vector<int>& order,
                                           const BucketLimits& limits);

}  // namespace loom::parallel
