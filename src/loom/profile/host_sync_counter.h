// The points where a GPU run's steps make the host wait for the GPU, found by torch's CUDA
// synchronisation warnings (core/cuda_sync_warnings.h). Each such wait drains the GPU's queue:
// the GPU then idles while the host queues the next work, and the host cannot run ahead.
//
// While it lives, the counter is the training thread's c10 warning handler and torch's warnings
// are on. A synchronisation inside a step counts to the phase the step is in; one between steps
// (a log line's loss read, a checkpoint's copy) is the run's own choice and is dropped; any other
// warning goes on to the handler that was there before. Those raised on autograd's threads in
// backward reach it too, when backward returns (autograd replays a backward's warnings on the
// thread that called it): they count as backward, whichever of its phases (tensor_comm,
// comm_exposed) raised them.
//
// Threading: the training thread only (c10's warning handlers are per thread); made and destroyed
// there.
#pragma once

#include <c10/util/Exception.h>

#include <array>
#include <cstdint>
#include <functional>

#include "loom/profile/host_syncs.h"

namespace loom::profile {

class HostSyncCounter : public c10::WarningHandler {
 public:
  // `turn(on)` switches torch's warnings on or off and says whether it could
  // (set_cuda_sync_warnings, or a test's own).
  explicit HostSyncCounter(std::function<bool(bool)> turn);
  ~HostSyncCounter() override;
  HostSyncCounter(const HostSyncCounter&) = delete;
  HostSyncCounter& operator=(const HostSyncCounter&) = delete;

  // Whether the warnings are on: nothing is counted otherwise.
  bool counting() const { return on_; }
  void begin_step();
  void enter(Phase phase) { phase_ = phase; }
  // `counted`: the step's synchronisations go into the totals (a steady step); else dropped.
  void end_step(bool counted);
  const HostSyncs& totals() const { return totals_; }

  void process(const c10::Warning& warning) override;

 private:
  std::function<bool(bool)> turn_;
  bool on_ = false;
  c10::WarningHandler* previous_;
  bool in_step_ = false;
  Phase phase_ = Phase::kOther;
  std::array<int64_t, kPhaseCount> step_{};
  HostSyncs totals_;
};

}  // namespace loom::profile
