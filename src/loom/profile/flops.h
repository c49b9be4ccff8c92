// Model FLOPs utilisation, from two measurements: the floating-point operations of a forward
// pass, counted from the shapes of the ATen calls it makes, and the machine's peak, from a
// short matrix-multiply calibration. MFU = achieved model FLOP/s / peak FLOP/s, with training
// taken as three forward passes (forward, and backward's two products per layer).
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>

namespace loom::profile {

// Counts, while alive, the FLOPs (a multiply-add is 2) of the convolutions and matrix products
// (convolution, addmm, mm, bmm) that this thread runs. Other operations are cheap next to
// them and are not counted. Works for TorchScript modules too: it watches the dispatcher.
class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  double flops() const;

 private:
  at::CallbackHandle handle_;
};

// FLOP/s of a square matrix product of `dtype` (float or bfloat16) on `device` (the CPU: on the
// current threads), the best of repeated runs for about `seconds`. A GPU's products are larger
// and timed in groups between waits for the device, so that launching them is not what is
// measured.
double measure_peak_flops(at::ScalarType dtype, double seconds = 0.3,
                          at::Device device = at::kCPU);

}  // namespace loom::profile
