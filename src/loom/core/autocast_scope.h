// Autocast as a scope, for every layer that runs a model's forward pass, on the device types Loom
// computes on: the CPU and CUDA devices. Autocast (bf16, or fp16 under loss scaling) is turned on
// for both at once, so that the layers that run a forward pass need not know where the model
// lives (ATen applies a device type's autocast only to tensors of that type).
#pragma once

#include <c10/core/ScalarType.h>

namespace loom {

// Autocast's per-thread state for the CPU and for CUDA devices.
struct AutocastState {
  struct Of {
    bool enabled = false;
    at::ScalarType dtype = at::kBFloat16;
  };
  Of cpu, cuda;

  // The calling thread's.
  static AutocastState current();
  // `lower` (kBFloat16 or kHalf) on both device types.
  static AutocastState lowered(at::ScalarType lower);
};

// Sets a state for its lifetime and restores the previous one after; the weight-cast cache lives
// as long as the outermost scope, as in PyTorch.
class AutocastScope {
 public:
  // Autocast to `lower` (kBFloat16 or kHalf: runtime.precision's bf16 or fp16); kFloat (fp32)
  // leaves the state alone.
  explicit AutocastScope(at::ScalarType lower);
  // Exactly `state` (all off: autocast disabled, as a block whose forward must run in fp32; a
  // recomputed block's first forward's: as it ran then).
  explicit AutocastScope(const AutocastState& state);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  void enter(const AutocastState& state);

  bool active_ = false;
  AutocastState previous_;
};

}  // namespace loom
