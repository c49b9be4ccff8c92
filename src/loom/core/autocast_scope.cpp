#include "loom/core/autocast_scope.h"

#include <ATen/autocast_mode.h>

namespace loom {
namespace {

AutocastState::Of state_of(at::DeviceType type) {
  return {at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
}

void make_current(at::DeviceType type, const AutocastState::Of& of) {
  at::autocast::set_autocast_enabled(type, of.enabled);
  at::autocast::set_autocast_dtype(type, of.dtype);
}

}  // namespace

AutocastState AutocastState::current() { return {state_of(at::kCPU), state_of(at::kCUDA)}; }

AutocastState AutocastState::lowered(at::ScalarType lower) {
  AutocastState s;
  s.cpu = s.cuda = {true, lower};
  return s;
}

AutocastScope::AutocastScope(at::ScalarType lower) {
  if (lower != at::kFloat) enter(AutocastState::lowered(lower));
}

AutocastScope::AutocastScope(const AutocastState& state) { enter(state); }

void AutocastScope::enter(const AutocastState& state) {
  active_ = true;
  previous_ = AutocastState::current();
  make_current(at::kCPU, state.cpu);
  make_current(at::kCUDA, state.cuda);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  make_current(at::kCPU, previous_.cpu);
  make_current(at::kCUDA, previous_.cuda);
}

}  // namespace loom
