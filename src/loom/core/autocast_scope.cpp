#include "loom/core/autocast_scope.h"

#include <ATen/autocast_mode.h>

namespace loom {

AutocastScope::AutocastScope(bool bf16) : active_(bf16) {
  if (!active_) return;
  was_enabled_ = at::autocast::is_cpu_enabled();
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The weight-cast cache lives as long as the outermost autocast region, as in PyTorch.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(was_enabled_);
}

}  // namespace loom
