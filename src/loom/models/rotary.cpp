#include "loom/models/rotary.h"

#include <ATen/ATen.h>

#include <cmath>

namespace loom::models {

at::Tensor rotary_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  // In fp32, in the order Hugging Face computes them: a checkpoint's model turns its heads by the
  // very angles it was trained with (a last-bit difference in a frequency grows with the
  // position: at 8,192 positions it would move an angle by ~1e-4).
  const at::Tensor exponents =
      at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
      static_cast<double>(head_dim);
  at::Tensor inverse = 1.0 / at::pow(theta, exponents);
  if (scaling.enabled()) {
    const double context = static_cast<double>(scaling.original_context);
    const double slow_above = context / scaling.low_freq_factor;   // wavelengths
    const double fast_below = context / scaling.high_freq_factor;  // wavelengths
    const at::Tensor wavelength = 2 * M_PI / inverse;
    // Between the two, a blend of the scaled and the kept frequency, weighted by how many
    // turns the original context makes of the wavelength.
    const at::Tensor weight = (context / wavelength - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
    const at::Tensor blended = (1 - weight) * inverse / scaling.factor + weight * inverse;
    inverse = at::where(wavelength > slow_above, inverse / scaling.factor,
                        at::where(wavelength < fast_below, inverse, blended));
  }
  return inverse;
}

Rotary::Rotary(int64_t head_dim, double theta, const RopeScaling& scaling)
    : inverse_frequencies_(rotary_inverse_frequencies(head_dim, theta, scaling)) {}

const Rotary::Table& Rotary::table(int64_t positions, at::ScalarType dtype, at::Device device) {
  Table& t = tables_[dtype];
  if (!t.cos.defined() || t.cos.size(0) < positions || t.cos.device() != device) {
    // At least twice what was held, so a decoder growing by one position rebuilds rarely.
    const int64_t held = t.cos.defined() && t.cos.device() == device ? t.cos.size(0) : 0;
    const int64_t length = std::max(positions, 2 * held);
    const at::Tensor angles =
        at::outer(at::arange(length, at::TensorOptions().dtype(at::kFloat)), inverse_frequencies_);
    const at::Tensor both = at::cat({angles, angles}, -1);
    t.cos = both.cos().to(device, dtype);
    t.sin = both.sin().to(device, dtype);
  }
  return t;
}

at::Tensor Rotary::apply(const at::Tensor& x, int64_t first) {
  const int64_t n = x.size(2), half = x.size(3) / 2;
  const Table& t = table(first + n, x.scalar_type(), x.device());
  const at::Tensor cos = t.cos.narrow(0, first, n), sin = t.sin.narrow(0, first, n);
  // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin): x cos + (-x2, x1) sin.
  const at::Tensor turned = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + turned * sin;
}

}  // namespace loom::models
