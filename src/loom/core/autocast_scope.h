// CPU bf16 autocast as a scope, for every layer that runs a model's forward pass.
#pragma once

namespace loom {

// Enables CPU bf16 autocast for its lifetime when asked to; restores the previous state.
class AutocastScope {
 public:
  explicit AutocastScope(bool bf16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_;
  bool was_enabled_ = false;
};

}  // namespace loom
