// The tcp backend's 16-bit float conversions agree with LibTorch's, bit for bit: rounding to
// nearest even (ties included), infinities, NaN, subnormals and values out of float16's range.
#include "loom/comm/float_widening.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

at::Tensor awkward_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {
      0.0f,        -0.0f,       1.0f,     -2.5f,    1.00390625f,  // a bf16 tie
      1.01171875f, 3.14159265f, 65504.0f, 70000.0f, 1e-6f,       6e-8f, -1e-40f, inf, -inf, 1e30f};
  auto t = at::tensor(values);
  return at::cat({t, at::randn({1000}) * 100});
}

TEST(FloatWidening, NarrowingRoundsAsLibTorchDoes) {
  const at::Tensor wide = awkward_floats();
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    at::Tensor ours = at::empty({wide.numel()}, dtype);
    narrow_from_float(dtype, wide.data_ptr<float>(), ours.data_ptr(), wide.numel());
    EXPECT_TRUE(ours.view(at::kShort).equal(wide.to(dtype).view(at::kShort)))
        << c10::toString(dtype);
  }
}

TEST(FloatWidening, WideningIsExactAndNaNStaysNaN) {
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    const at::Tensor narrow = awkward_floats().to(dtype);
    at::Tensor ours = at::empty({narrow.numel()}, at::kFloat);
    widen_to_float(dtype, narrow.data_ptr(), ours.data_ptr<float>(), narrow.numel());
    EXPECT_TRUE(ours.equal(narrow.to(at::kFloat))) << c10::toString(dtype);

    const float nan = std::numeric_limits<float>::quiet_NaN();
    at::Tensor back = at::empty({1}, dtype);
    narrow_from_float(dtype, &nan, back.data_ptr(), 1);
    float again = 0;
    widen_to_float(dtype, back.data_ptr(), &again, 1);
    EXPECT_TRUE(std::isnan(again)) << c10::toString(dtype);
  }
}

TEST(FloatWidening, OtherTypesAreRefused) {
  float out = 0;
  const int in = 1;
  EXPECT_FALSE(widens_to_float(at::kFloat));
  EXPECT_THROW(widen_to_float(at::kInt, &in, &out, 1), Error);
}

}  // namespace
}  // namespace loom::comm
