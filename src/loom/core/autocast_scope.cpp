#include "loom/core/autocast_scope.h"

#include <ATen/autocast_mode.h>

namespace loom {

AutocastScope::AutocastScope(bool bf16) : active_(bf16) {
  if (!active_) return;
  was_enabled_ = at::autocast::is_autocast_enabled(at::kCPU);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The weight-cast cache lives as long as the outermost autocast region, as in PyTorch.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCPU, was_enabled_);
}

}  // namespace loom
