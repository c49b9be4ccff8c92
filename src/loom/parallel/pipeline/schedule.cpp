#include "loom/parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

using Kind = ActionKind;

std::string numbers(int microbatches, int ranks) {
  return " (micro-batches " + std::to_string(microbatches) + ", ranks " + std::to_string(ranks) +
         ")";
}

// All forwards, then all backwards; with several chunks per rank, chunk by chunk (backward in
// reverse chunk order). Holds every micro-batch's activations at once; the simplest schedule.
void gpipe(Schedule& s) {
  for (int r = 0; r < s.ranks; ++r) {
    auto& list = s.actions[static_cast<size_t>(r)];
    for (int c = 0; c < s.chunks(); ++c) {
      for (int m = 0; m < s.microbatches; ++m) list.push_back({c * s.ranks + r, Kind::kForward, m});
    }
    for (int c = s.chunks() - 1; c >= 0; --c) {
      for (int m = 0; m < s.microbatches; ++m) {
        list.push_back({c * s.ranks + r, Kind::kBackward, m});
      }
    }
  }
}

// One forward, one backward: stage s runs ranks-1-s forwards ahead, then alternates, so it holds
// at most ranks-s micro-batches of activations.
void one_f_one_b(Schedule& s) {
  const int p = s.ranks, m = s.microbatches;
  for (int stage = 0; stage < p; ++stage) {
    auto& list = s.actions[static_cast<size_t>(stage)];
    const int warmup = std::min(p - 1 - stage, m);
    for (int i = 0; i < warmup; ++i) list.push_back({stage, Kind::kForward, i});
    for (int i = 0; i < m - warmup; ++i) {
      list.push_back({stage, Kind::kForward, warmup + i});
      list.push_back({stage, Kind::kBackward, i});
    }
    for (int i = m - warmup; i < m; ++i) list.push_back({stage, Kind::kBackward, i});
  }
}

// Interleaved 1F1B (Megatron-LM): each rank holds `chunks` stages and works through micro-batches
// in groups of `ranks`, chunk after chunk; the warm-up is long enough for the first backward to
// reach every rank. Cuts the bubble by about the number of chunks.
void interleaved(Schedule& s) {
  const int p = s.ranks, v = s.chunks(), m = s.microbatches;
  const int total = m * v;
  const auto microbatch = [&](int k) { return (k / (p * v)) * p + k % p; };
  const auto chunk = [&](int k, bool forward) {
    const int c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  for (int r = 0; r < p; ++r) {
    auto& list = s.actions[static_cast<size_t>(r)];
    const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
    const auto forward = [&](int k) {
      list.push_back({chunk(k, true) * p + r, Kind::kForward, microbatch(k)});
    };
    const auto backward = [&](int k) {
      list.push_back({chunk(k, false) * p + r, Kind::kBackward, microbatch(k)});
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
}

// Zero-bubble ZB-H1 (Qi et al.): 1F1B's order with each backward split into the input gradient
// (I, on the critical path to the previous stage) and the weight gradient (W, which nothing waits
// for). Stage s lets up to s W's wait: the later stages, where the chain of input gradients
// starts, send them upstream sooner and do their W's while the earlier stages catch up. With
// equal F, I and W costs this reaches ZB-H1's step of M(F+I+W) + (P-1)(F+I-W) (tested), against
// 1F1B's M(F+I+W) + (P-1)(F+I+W). Activations are freed at I, so the memory is 1F1B's.
void zero_bubble_h1(Schedule& s) {
  const int p = s.ranks, m = s.microbatches;
  for (int stage = 0; stage < p; ++stage) {
    auto& list = s.actions[static_cast<size_t>(stage)];
    const int warmup = std::min(p - 1 - stage, m);
    const size_t deferred = static_cast<size_t>(stage);
    std::deque<int> pending;
    const auto input_gradient = [&](int i) {
      list.push_back({stage, Kind::kBackwardInput, i});
      pending.push_back(i);
      while (pending.size() > deferred) {
        list.push_back({stage, Kind::kBackwardWeight, pending.front()});
        pending.pop_front();
      }
    };
    for (int i = 0; i < warmup; ++i) list.push_back({stage, Kind::kForward, i});
    for (int i = 0; i < m - warmup; ++i) {
      list.push_back({stage, Kind::kForward, warmup + i});
      input_gradient(i);
    }
    for (int i = m - warmup; i < m; ++i) input_gradient(i);
    for (int i : pending) list.push_back({stage, Kind::kBackwardWeight, i});
  }
}

}  // namespace

bool Schedule::splits_backward() const {
  for (const auto& list : actions) {
    for (const Action& a : list) {
      if (a.kind == Kind::kBackwardInput || a.kind == Kind::kBackwardWeight) return true;
    }
  }
  return false;
}

std::string Schedule::describe_rank(int rank) const {
  std::string out;
  for (const Action& a : actions.at(static_cast<size_t>(rank))) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zb_h1"};
  return names;
}

std::vector<int> looped_stage_ranks(int ranks, int stages) {
  std::vector<int> out(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) out[static_cast<size_t>(s)] = s % ranks;
  return out;
}

Schedule make_schedule(const std::string& name, int ranks, int chunks, int microbatches) {
  if (ranks < 1) {
    throw ConfigError("config key 'parallel.pipeline.stages': " + std::to_string(ranks) +
                      ", expected at least 1");
  }
  if (chunks < 1) {
    throw ConfigError("config key 'parallel.pipeline.chunks': " + std::to_string(chunks) +
                      ", expected at least 1");
  }
  if (microbatches < 1) {
    throw ConfigError("config key 'parallel.pipeline.microbatches': " +
                      std::to_string(microbatches) + ", expected at least 1");
  }
  Schedule s;
  s.name = name;
  s.ranks = ranks;
  s.stages = ranks * chunks;
  s.microbatches = microbatches;
  s.stage_rank = looped_stage_ranks(ranks, s.stages);
  s.actions.resize(static_cast<size_t>(ranks));
  const bool one_chunk_only = name == "1f1b" || name == "zb_h1";
  if (one_chunk_only && chunks != 1) {
    throw ConfigError("config key 'parallel.pipeline.chunks': " + name +
                      " runs one stage per rank, got " + std::to_string(chunks) +
                      "; use schedule 'interleaved' for several stages per rank");
  }
  if (one_chunk_only && microbatches < ranks) {
    // With fewer micro-batches than stages these schedules cannot fill the pipeline (and
    // torch.distributed.pipelining hangs on them): say what works instead.
    throw ConfigError("config key 'parallel.pipeline.microbatches': " + name +
                      " needs at least as many micro-batches as stages" +
                      numbers(microbatches, ranks) + "; use " + std::to_string(ranks) +
                      " or more, or schedule 'gpipe'");
  }
  if (name == "gpipe") {
    gpipe(s);
  } else if (name == "1f1b") {
    one_f_one_b(s);
  } else if (name == "zb_h1") {
    zero_bubble_h1(s);
  } else if (name == "interleaved") {
    if (microbatches % ranks != 0) {
      const int lower = microbatches / ranks * ranks, upper = lower + ranks;
      throw ConfigError(
          "config key 'parallel.pipeline.microbatches': interleaved works through micro-batches "
          "in groups of one per rank, so they must be a multiple of the ranks" +
          numbers(microbatches, ranks) + "; use " +
          (lower > 0 ? std::to_string(lower) + " or " : std::string()) + std::to_string(upper));
    }
    if (chunks == 1) {
      one_f_one_b(s);  // one chunk per rank: interleaving has nothing to interleave
    } else {
      interleaved(s);
    }
  } else {
    std::string known;
    for (const auto& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("config key 'parallel.pipeline.schedule': unknown schedule '" + name +
                      "' (known: " + known + ", or a .csv file of actions)");
  }
  add_communication(s);
  return s;
}

void add_communication(Schedule& s) {
  const auto remote = [&](int rank, int stage) {
    return stage >= 0 && stage < s.stages && s.stage_rank[static_cast<size_t>(stage)] != rank;
  };
  const auto rank_of = [&](int stage) { return s.stage_rank[static_cast<size_t>(stage)]; };
  // Sends first, each right after the computation that produced what it sends. What goes over
  // each link (from rank, to rank) is recorded as the receives that take it, in sending order.
  std::map<std::pair<int, int>, std::deque<Action>> in_flight;
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<Action> with_sends;
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      if (a.is_communication()) continue;  // laid out anew
      with_sends.push_back(a);
      const bool forward = a.kind == Kind::kForward;
      const bool gradient = a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput;
      const int peer_stage = forward ? a.stage + 1 : a.stage - 1;
      if ((forward || gradient) && remote(r, peer_stage)) {
        const Action send{a.stage, forward ? Kind::kSendForward : Kind::kSendBackward,
                          a.microbatch};
        with_sends.push_back(send);
        in_flight[{r, rank_of(peer_stage)}].push_back(receive_of(send));
      }
    }
    s.actions[static_cast<size_t>(r)] = std::move(with_sends);
  }
  // Then receives. The Communicator pairs sends and receives between two ranks in call order,
  // so a receive cannot simply sit right before the computation that needs it: when the peer
  // sent other messages on the same link first (looped placement with 2 ranks sends both
  // activations and gradients each way; a zero-bubble order interleaves them differently on the
  // two ranks), those are received first, just before it. Taking a message early cannot
  // deadlock: it was sent before the one this rank waits for at that point anyway.
  for (int r = 0; r < s.ranks; ++r) {
    std::set<std::tuple<int, Kind, int>> received;
    std::vector<Action> with_comm;
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      const bool forward = a.kind == Kind::kForward;
      const bool gradient = a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput;
      const int peer_stage = forward ? a.stage - 1 : a.stage + 1;
      if ((forward || gradient) && remote(r, peer_stage)) {
        const Action wanted{a.stage, forward ? Kind::kRecvForward : Kind::kRecvBackward,
                            a.microbatch};
        std::deque<Action>& link = in_flight[{rank_of(peer_stage), r}];
        if (std::find(link.begin(), link.end(), wanted) != link.end()) {
          bool taken = false;
          while (!taken) {
            const Action next = link.front();
            link.pop_front();
            with_comm.push_back(next);
            received.insert({next.stage, next.kind, next.microbatch});
            taken = next == wanted;
          }
        } else if (!received.count({wanted.stage, wanted.kind, wanted.microbatch})) {
          with_comm.push_back(wanted);  // nothing sends it: validate() names the missing send
        }
      }
      with_comm.push_back(a);
    }
    s.actions[static_cast<size_t>(r)] = std::move(with_comm);
  }
}

}  // namespace loom::parallel::pipeline
