#include "loom/core/step_phase.h"

namespace loom {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kDataWait:
      return "data_wait";
    case Phase::kH2D:
      return "h2d";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kCommExposed:
      return "comm_exposed";
    case Phase::kTensorComm:
      return "tensor_comm";
    case Phase::kBubble:
      return "bubble";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kOther:
      return "other";
  }
  return "unknown";
}

}  // namespace loom
