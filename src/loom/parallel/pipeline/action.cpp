#include "loom/parallel/pipeline/action.h"

#include <cctype>
#include <cstring>

#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

constexpr ActionKind kKinds[] = {ActionKind::kForward,       ActionKind::kBackward,
                                 ActionKind::kBackwardInput, ActionKind::kBackwardWeight,
                                 ActionKind::kSendForward,   ActionKind::kRecvForward,
                                 ActionKind::kSendBackward,  ActionKind::kRecvBackward};

// Reads a non-negative decimal number at `pos`; -1 when there is none or it is too long.
int read_number(const std::string& text, size_t& pos) {
  const size_t start = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == start || pos - start > 6) return -1;
  return std::stoi(text.substr(start, pos - start));
}

}  // namespace

bool Action::is_compute() const {
  return kind == ActionKind::kForward || kind == ActionKind::kBackward ||
         kind == ActionKind::kBackwardInput || kind == ActionKind::kBackwardWeight;
}

Action receive_of(const Action& send) {
  if (send.kind == ActionKind::kSendForward) {
    return {send.stage + 1, ActionKind::kRecvForward, send.microbatch};
  }
  return {send.stage - 1, ActionKind::kRecvBackward, send.microbatch};
}

const char* kind_code(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendForward:
      return "SEND_F";
    case ActionKind::kRecvForward:
      return "RECV_F";
    case ActionKind::kSendBackward:
      return "SEND_B";
    case ActionKind::kRecvBackward:
      return "RECV_B";
  }
  return "?";
}

std::string to_string(const Action& action) {
  return std::to_string(action.stage) + kind_code(action.kind) + std::to_string(action.microbatch);
}

Action parse_action(const std::string& text) {
  const auto fail = [&](const std::string& why) -> Action {
    throw ConfigError("pipeline action '" + text + "': " + why +
                      " (expected <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>, "
                      "e.g. 0F1)");
  };
  size_t pos = 0;
  Action action;
  action.stage = read_number(text, pos);
  if (action.stage < 0) return fail("no stage number");
  // Longest code first: "B" is a prefix of nothing, but SEND_/RECV_ codes must win over F/B.
  size_t matched = 0;
  for (ActionKind kind : kKinds) {
    const char* code = kind_code(kind);
    const size_t n = std::strlen(code);
    if (n > matched && text.compare(pos, n, code) == 0) {
      action.kind = kind;
      matched = n;
    }
  }
  if (matched == 0) return fail("unknown action kind");
  pos += matched;
  action.microbatch = read_number(text, pos);
  if (action.microbatch < 0) return fail("no micro-batch number");
  if (pos != text.size()) return fail("unexpected text after the micro-batch");
  return action;
}

}  // namespace loom::parallel::pipeline
