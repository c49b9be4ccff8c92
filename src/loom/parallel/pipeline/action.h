// One step of a pipeline schedule on one rank, and its text form. The text form is
// torch.distributed.pipelining's action strings, so schedules can be exchanged with it:
// "<stage><kind><micro-batch>", e.g. "0F1" (stage 0 forward of micro-batch 1), "1B0",
// "2I3" / "2W3" (zero-bubble: input gradient / weight gradient), "0SEND_F1", "1RECV_F1".
// A send names the sending stage, a receive the receiving stage.
#pragma once

#include <string>

namespace loom::parallel::pipeline {

enum class ActionKind {
  kForward,         // F
  kBackward,        // B: input and weight gradients together
  kBackwardInput,   // I: the gradient for the previous stage only
  kBackwardWeight,  // W: the weight gradients of an earlier I
  kSendForward,     // SEND_F: activations to the next stage
  kRecvForward,     // RECV_F: activations from the previous stage
  kSendBackward,    // SEND_B: input gradient to the previous stage
  kRecvBackward,    // RECV_B: output gradient from the next stage
};

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;

  bool operator==(const Action& o) const {
    return stage == o.stage && kind == o.kind && microbatch == o.microbatch;
  }
  bool is_compute() const;
  bool is_communication() const { return !is_compute(); }
};

// The receive that takes what `send` (SEND_F or SEND_B) sends: 0SEND_F1 -> 1RECV_F1,
// 2SEND_B0 -> 1RECV_B0.
Action receive_of(const Action& send);

const char* kind_code(ActionKind kind);  // "F", "B", ..., "RECV_B"
std::string to_string(const Action& action);
// Inverse of to_string; throws ConfigError quoting the text when it is not an action.
Action parse_action(const std::string& text);

}  // namespace loom::parallel::pipeline
