// The GradSync of a single process: nothing to exchange, so it only clears gradients.
#pragma once

#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"

namespace loom::parallel {

class LocalGradSync : public GradSync {
 public:
  explicit LocalGradSync(models::NamedTensors parameters) : parameters_(std::move(parameters)) {}

  // Unset rather than zeroed: backward then stores its gradient instead of adding it to zeros,
  // which saves a memset and a read-add-write over every parameter.
  void zero_grad() override {
    for (auto& [name, p] : parameters_) p.mutable_grad().reset();
  }
  void prepare() override {}
  void finish() override {}
  void sync_buffers() override {}
  const SyncStats& last_stats() const override { return stats_; }

 private:
  models::NamedTensors parameters_;
  SyncStats stats_;
};

}  // namespace loom::parallel
