#include "loom/profile/flops.h"

#include <ATen/DeviceAccelerator.h>

#include <chrono>
#include <cstring>

namespace loom::profile {
namespace {

thread_local double counted = 0;
// Counted calls in progress: an implementation may call another counted op (grouped
// convolutions call convolution per group); only the outermost call counts.
thread_local int active = 0;

double numel(const at::IValue& v) {
  return v.isTensor() ? static_cast<double>(v.toTensor().numel()) : 0;
}

// FLOPs of one call, from its inputs.
double call_flops(const char* name, c10::ArrayRef<const c10::IValue> in) {
  if (std::strcmp(name, "aten::convolution") == 0 && in.size() >= 9 && in[0].isTensor() &&
      in[1].isTensor()) {
    // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    // groups): every output element is a dot product over weight[c] (Cin / groups * kh * kw).
    const at::Tensor& x = in[0].toTensor();
    const at::Tensor& w = in[1].toTensor();
    const auto stride = in[3].toIntVector(), padding = in[4].toIntVector();
    const auto dilation = in[5].toIntVector();
    // A one-element list stands for every spatial dimension.
    auto at_dim = [](const std::vector<int64_t>& v, size_t i) {
      return v.size() == 1 ? v[0] : v[i];
    };
    double outputs = static_cast<double>(x.size(0) * w.size(0));
    for (int64_t d = 2; d < x.dim(); ++d) {
      const size_t i = static_cast<size_t>(d - 2);
      const int64_t size =
          (x.size(d) + 2 * at_dim(padding, i) - at_dim(dilation, i) * (w.size(d) - 1) - 1) /
              at_dim(stride, i) +
          1;
      outputs *= static_cast<double>(size);
    }
    return 2 * outputs * static_cast<double>(w.numel() / w.size(0));
  }
  if ((std::strcmp(name, "aten::mm") == 0 || std::strcmp(name, "aten::bmm") == 0) &&
      in.size() >= 2 && in[1].isTensor()) {
    // [.., M, K] x [.., K, N]: 2 * (elements of the first) * N.
    return 2 * numel(in[0]) * static_cast<double>(in[1].toTensor().size(-1));
  }
  if (std::strcmp(name, "aten::addmm") == 0 && in.size() >= 3 && in[2].isTensor()) {
    return 2 * numel(in[1]) * static_cast<double>(in[2].toTensor().size(-1));
  }
  return 0;
}

// The context marks a counted call, so that its end leaves the nesting.
struct Counted : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  const double flops = call_flops(fn.name(), fn.inputs());
  if (flops == 0) return nullptr;
  if (active++ == 0) counted += flops;
  return std::make_unique<Counted>();
}

void on_exit(const at::RecordFunction&, at::ObserverContext* context) {
  if (context) --active;
}

}  // namespace

FlopCounter::FlopCounter() {
  counted = 0;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                           .needsInputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
}

FlopCounter::~FlopCounter() { at::removeCallback(handle_); }

double FlopCounter::flops() const { return counted; }

double measure_peak_flops(at::ScalarType dtype, double seconds, at::Device device) {
  const bool host = device.is_cpu();
  // An H100's bf16 products reach their rate from about 4096 wide; a CPU's from 512.
  const int64_t n = host ? 512 : 8192, group = host ? 1 : 10;
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor a = at::randn({n, n}, options), b = at::randn({n, n}, options);
  const auto wait = [&] {
    if (!host) at::accelerator::synchronizeDevice(device.index());
  };
  at::Tensor c = at::mm(a, b);  // warm-up: kernels chosen, memory touched
  wait();
  double best = 0, spent = 0;
  while (spent < seconds) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < group; ++i) c = at::mm(a, b);
    wait();
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spent += t;
    if (t > 0) best = std::max(best, 2.0 * n * n * n * group / t);
  }
  return best;
}

}  // namespace loom::profile
