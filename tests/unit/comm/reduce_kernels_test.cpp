#include "loom/comm/reduce_kernels.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

// Sums `count` tensors with reduce_sum; the first one doubles as the output when `in_place`.
at::Tensor reduce(std::vector<at::Tensor> inputs, double scale, bool in_place = false) {
  std::vector<const void*> pointers;
  for (const auto& t : inputs) pointers.push_back(t.data_ptr());
  at::Tensor out = in_place ? inputs[0] : at::empty_like(inputs[0]);
  reduce_sum(inputs[0].scalar_type(), out.data_ptr(), pointers.data(),
             static_cast<int>(inputs.size()), inputs[0].numel(), scale);
  return out;
}

TEST(ReduceKernels, FloatSumMatchesATenInRankOrder) {
  at::manual_seed(1);
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < 3; ++r) inputs.push_back(at::randn({5000}));
  const auto want = (inputs[0] + inputs[1]) + inputs[2];
  EXPECT_TRUE(at::equal(reduce(inputs, 1.0), want));  // bitwise: same order of additions
  EXPECT_TRUE(at::allclose(reduce(inputs, 1.0 / 3), want / 3, 1e-6, 1e-7));
}

TEST(ReduceKernels, BFloat16AccumulatesInFloatAndRoundsOnce) {
  at::manual_seed(2);
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < 4; ++r) inputs.push_back(at::randn({3001}).to(at::kBFloat16));
  auto wide = at::zeros({3001});
  for (const auto& t : inputs) wide += t.to(at::kFloat);
  // ATen's float -> bfloat16 conversion rounds to nearest even, as the kernel must.
  EXPECT_TRUE(at::equal(reduce(inputs, 1.0), wide.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(reduce(inputs, 0.25), (wide * 0.25f).to(at::kBFloat16)));
}

TEST(ReduceKernels, OutputMayAliasAnInput) {
  auto a = at::arange(2000, at::kFloat), b = at::full({2000}, 0.5f);
  const auto want = a + b;
  reduce({a, b}, 1.0, /*in_place=*/true);
  EXPECT_TRUE(at::equal(a, want));
}

TEST(ReduceKernels, IntegersAndDoubles) {
  auto a = at::arange(100, at::kLong), b = at::arange(100, at::kLong) * 3;
  EXPECT_TRUE(at::equal(reduce({a, b}, 1.0), a * 4));
  EXPECT_THROW(reduce({a, b}, 0.5), CommError);
  auto c = at::rand({77}, at::kDouble), d = at::rand({77}, at::kDouble);
  EXPECT_TRUE(at::allclose(reduce({c, d}, 0.5), (c + d) * 0.5));
  EXPECT_FALSE(reducible(at::kBool));
}

}  // namespace
}  // namespace loom::comm
