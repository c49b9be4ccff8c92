// The phases a training step's time is charged to. Every layer that runs part of a step (the
// trainer, the step executors, gradient sync) reports its phase boundaries in these terms, and
// profile/ accounts and explains them; so the vocabulary lives here, below all of them.
#pragma once

#include <cstddef>

namespace loom {

enum class Phase {
  kDataWait,     // blocked on the loader
  kH2D,          // the feeder: to the device, dtype, layout, normalisation
  kForward,      // model and loss
  kBackward,     // autograd
  kCommExposed,  // gradient exchange not hidden behind compute; a pipeline's transfers
  kTensorComm,   // a tensor group's all-reduces inside forward and backward (parallel.tensor)
  kBubble,       // a pipeline rank idle until a neighbouring stage has computed its input
  kOptimizer,    // clipping and the optimizer step
  kOther,        // everything else: bookkeeping, logging
};
constexpr std::size_t kPhaseCount = 9;

// The phase's name in metrics.jsonl, summary.json and traces ("data_wait", ...).
const char* phase_name(Phase phase);

// Receives phase boundaries: from the call on, time is charged to `phase`. Implemented by the
// trainer's step accounting; called on the training thread only.
class PhaseSink {
 public:
  virtual ~PhaseSink() = default;
  virtual void enter(Phase phase) = 0;
};

}  // namespace loom
