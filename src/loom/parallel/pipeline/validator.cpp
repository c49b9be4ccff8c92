#include "loom/parallel/pipeline/validator.h"

#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "loom/core/error.h"
#include "loom/parallel/pipeline/simulator.h"

namespace loom::parallel::pipeline {
namespace {

using Kind = ActionKind;

// What has happened to one (stage, micro-batch) so far.
struct Progress {
  bool forward = false, backward = false, input = false, weight = false;
  bool received_input = false, received_gradient = false;
  bool sent_output = false, sent_gradient = false;
};

class Checker {
 public:
  explicit Checker(const Schedule& s) : s_(s) {}

  void run() {
    check_shape();
    for (int r = 0; r < s_.ranks; ++r) {
      const auto& list = s_.actions[static_cast<size_t>(r)];
      for (size_t i = 0; i < list.size(); ++i) check_action(r, i, list[i]);
    }
    check_complete();
    check_matched();
    check_link_order();
    const Simulation dry = simulate(s_, uniform_costs(s_.stages));
    if (dry.deadlocked) fail("the schedule deadlocks: " + dry.deadlock);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError("pipeline schedule '" + s_.name + "': " + why);
  }
  [[noreturn]] void fail_at(int rank, size_t index, const Action& a, const std::string& why) const {
    fail("rank " + std::to_string(rank) + ", action " + std::to_string(index) + " (" +
         to_string(a) + "): " + why);
  }

  bool remote(int rank, int stage) const {
    return stage >= 0 && stage < s_.stages && s_.stage_rank[static_cast<size_t>(stage)] != rank;
  }
  Progress& at(const Action& a) {
    return progress_[static_cast<size_t>(a.stage) * static_cast<size_t>(s_.microbatches) +
                     static_cast<size_t>(a.microbatch)];
  }

  void check_shape() {
    if (s_.ranks < 1 || s_.stages < 1 || s_.microbatches < 1) {
      fail("needs at least one rank, stage and micro-batch (ranks " + std::to_string(s_.ranks) +
           ", stages " + std::to_string(s_.stages) + ", micro-batches " +
           std::to_string(s_.microbatches) + ")");
    }
    if (s_.actions.size() != static_cast<size_t>(s_.ranks) ||
        s_.stage_rank.size() != static_cast<size_t>(s_.stages)) {
      fail("has " + std::to_string(s_.actions.size()) + " action lists for " +
           std::to_string(s_.ranks) + " ranks");
    }
    for (int stage = 0; stage < s_.stages; ++stage) {
      const int rank = s_.stage_rank[static_cast<size_t>(stage)];
      if (rank < 0 || rank >= s_.ranks) {
        fail("stage " + std::to_string(stage) + " is on rank " + std::to_string(rank) +
             ", which does not exist");
      }
    }
    progress_.assign(static_cast<size_t>(s_.stages) * static_cast<size_t>(s_.microbatches), {});
  }

  void check_action(int rank, size_t index, const Action& a) {
    const auto bad = [&](const std::string& why) { fail_at(rank, index, a, why); };
    if (a.stage < 0 || a.stage >= s_.stages) {
      bad("stage " + std::to_string(a.stage) + " does not exist (" + std::to_string(s_.stages) +
          " stages)");
    }
    if (a.microbatch < 0 || a.microbatch >= s_.microbatches) {
      bad("micro-batch " + std::to_string(a.microbatch) + " does not exist (" +
          std::to_string(s_.microbatches) + " micro-batches)");
    }
    const int owner = s_.stage_rank[static_cast<size_t>(a.stage)];
    if (owner != rank) {
      bad("stage " + std::to_string(a.stage) + " runs on rank " + std::to_string(owner) +
          "; each stage is on one rank");
    }
    Progress& p = at(a);
    switch (a.kind) {
      case Kind::kForward:
        if (p.forward) bad("forward runs twice");
        if (remote(rank, a.stage - 1) && !p.received_input) {
          bad("forward before receiving its input (" + std::to_string(a.stage) + "RECV_F" +
              std::to_string(a.microbatch) + ")");
        }
        p.forward = true;
        break;
      case Kind::kBackward:
      case Kind::kBackwardInput: {
        const bool full = a.kind == Kind::kBackward;
        if (!p.forward) bad("backward before forward");
        if (p.backward || p.input) bad("backward runs twice");
        if (remote(rank, a.stage + 1) && !p.received_gradient) {
          bad("backward before receiving its output gradient (" + std::to_string(a.stage) +
              "RECV_B" + std::to_string(a.microbatch) + ")");
        }
        (full ? p.backward : p.input) = true;
        break;
      }
      case Kind::kBackwardWeight:
        if (p.backward) bad("W after a full backward B, which computed the weight gradients");
        if (!p.input) bad("weight gradient (W) before the input gradient (I)");
        if (p.weight) bad("weight gradient runs twice");
        p.weight = true;
        break;
      case Kind::kSendForward:
        if (!remote(rank, a.stage + 1)) bad("no next stage on another rank to send to");
        if (!p.forward) bad("sends activations before computing them");
        if (p.sent_output) bad("sent twice");
        p.sent_output = true;
        break;
      case Kind::kRecvForward:
        if (!remote(rank, a.stage - 1)) bad("no previous stage on another rank to receive from");
        if (p.received_input) bad("received twice");
        p.received_input = true;
        break;
      case Kind::kSendBackward:
        if (!remote(rank, a.stage - 1)) bad("no previous stage on another rank to send to");
        if (!p.backward && !p.input) bad("sends the input gradient before computing it");
        if (p.sent_gradient) bad("sent twice");
        p.sent_gradient = true;
        break;
      case Kind::kRecvBackward:
        if (!remote(rank, a.stage + 1)) bad("no next stage on another rank to receive from");
        if (p.received_gradient) bad("received twice");
        p.received_gradient = true;
        break;
    }
  }

  void check_complete() {
    for (int stage = 0; stage < s_.stages; ++stage) {
      for (int m = 0; m < s_.microbatches; ++m) {
        const Progress& p = at({stage, Kind::kForward, m});
        const std::string where =
            "micro-batch " + std::to_string(m) + " on stage " + std::to_string(stage);
        if (!p.forward) fail(where + " has no forward (F)");
        if (!p.backward && !p.input) fail(where + " has no backward (B, or I and W)");
        if (p.input && !p.weight) fail(where + " has an input gradient (I) but no W");
      }
    }
  }

  // Every send has its receive on the other side, and every receive its send.
  void check_matched() {
    for (int stage = 0; stage < s_.stages; ++stage) {
      for (int m = 0; m < s_.microbatches; ++m) {
        const Progress& p = at({stage, Kind::kForward, m});
        const std::string mb = std::to_string(m);
        if (stage + 1 < s_.stages) {
          const Progress& next = at({stage + 1, Kind::kForward, m});
          if (p.sent_output != next.received_input) {
            fail(p.sent_output ? std::to_string(stage) + "SEND_F" + mb + " has no matching " +
                                     std::to_string(stage + 1) + "RECV_F" + mb
                               : std::to_string(stage + 1) + "RECV_F" + mb + " has no matching " +
                                     std::to_string(stage) + "SEND_F" + mb);
          }
          if (next.sent_gradient != p.received_gradient) {
            fail(next.sent_gradient
                     ? std::to_string(stage + 1) + "SEND_B" + mb + " has no matching " +
                           std::to_string(stage) + "RECV_B" + mb
                     : std::to_string(stage) + "RECV_B" + mb + " has no matching " +
                           std::to_string(stage + 1) + "SEND_B" + mb);
          }
        }
        if (stage > 0 && remote(s_.stage_rank[static_cast<size_t>(stage)], stage - 1) &&
            !p.sent_gradient) {
          fail("stage " + std::to_string(stage) +
               " never sends the input gradient of micro-batch " + mb + " to stage " +
               std::to_string(stage - 1) + " (" + std::to_string(stage) + "SEND_B" + mb + ")");
        }
        if (stage + 1 < s_.stages && remote(s_.stage_rank[static_cast<size_t>(stage)], stage + 1) &&
            !p.sent_output) {
          fail("stage " + std::to_string(stage) + " never sends the output of micro-batch " + mb +
               " to stage " + std::to_string(stage + 1) + " (" + std::to_string(stage) + "SEND_F" +
               mb + ")");
        }
      }
    }
  }

  // The Communicator pairs sends and receives between two ranks in call order, so on every link
  // (from one rank to another) the receives must come in the order of the sends; otherwise a
  // tensor lands on another action's receive. Every send has its receive here (check_matched).
  void check_link_order() const {
    struct Message {
      Action receive;  // the receive that takes it
      size_t index;    // the position of the send or receive in its rank's list
    };
    std::map<std::pair<int, int>, std::vector<Message>> sent, received;
    for (int r = 0; r < s_.ranks; ++r) {
      const auto& list = s_.actions[static_cast<size_t>(r)];
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.kind == Kind::kSendForward || a.kind == Kind::kSendBackward) {
          const Action receive = receive_of(a);
          sent[{r, rank_of(receive.stage)}].push_back({receive, i});
        } else if (a.kind == Kind::kRecvForward || a.kind == Kind::kRecvBackward) {
          const int from = rank_of(a.kind == Kind::kRecvForward ? a.stage - 1 : a.stage + 1);
          received[{from, r}].push_back({a, i});
        }
      }
    }
    for (const auto& [link, receives] : received) {
      const std::vector<Message>& sends = sent[link];
      for (size_t k = 0; k < receives.size() && k < sends.size(); ++k) {
        if (receives[k].receive == sends[k].receive) continue;
        const Action& send = s_.actions[static_cast<size_t>(link.first)][sends[k].index];
        fail_at(link.second, receives[k].index, receives[k].receive,
                "receives from rank " + std::to_string(link.first) + " out of order: rank " +
                    std::to_string(link.first) + " sends " + to_string(send) + " (its action " +
                    std::to_string(sends[k].index) + ") before " +
                    to_string(send_of(receives[k].receive)) +
                    ", and messages between two ranks arrive in the order they are sent");
      }
    }
  }

  int rank_of(int stage) const { return s_.stage_rank[static_cast<size_t>(stage)]; }
  static Action send_of(const Action& receive) {
    if (receive.kind == Kind::kRecvForward) {
      return {receive.stage - 1, Kind::kSendForward, receive.microbatch};
    }
    return {receive.stage + 1, Kind::kSendBackward, receive.microbatch};
  }

  const Schedule& s_;
  std::vector<Progress> progress_;
};

}  // namespace

void validate(const Schedule& schedule) { Checker(schedule).run(); }

}  // namespace loom::parallel::pipeline
