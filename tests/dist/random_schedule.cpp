#include "dist/random_schedule.h"

#include <random>
#include <vector>

namespace loom::test {

namespace pp = parallel::pipeline;
using Kind = pp::ActionKind;

pp::Schedule random_schedule(uint64_t seed, const RandomScheduleOptions& o) {
  pp::Schedule s;
  s.name = "random-" + std::to_string(seed);
  s.ranks = o.ranks;
  s.stages = o.ranks * o.chunks;
  s.microbatches = o.microbatches;
  s.stage_rank = pp::looped_stage_ranks(s.ranks, s.stages);
  s.actions.resize(static_cast<size_t>(s.ranks));
  std::mt19937_64 random(seed);

  // What each (stage, micro-batch) has done: 0 nothing, 1 F, 2 B or I, 3 W (split only).
  const auto at = [&](int stage, int m) {
    return static_cast<size_t>(stage) * static_cast<size_t>(s.microbatches) +
           static_cast<size_t>(m);
  };
  std::vector<int> done(static_cast<size_t>(s.stages * s.microbatches), 0);
  std::vector<bool> split(done.size(), false);
  for (size_t i = 0; i < split.size(); ++i) {
    split[i] = o.split_backward && std::uniform_int_distribution<int>(0, 3)(random) != 0;
  }
  // The next computation of (stage, m), if what it needs has run.
  const auto ready = [&](int stage, int m, pp::Action& next) {
    const int d = done[at(stage, m)];
    const bool last = stage + 1 == s.stages;
    if (d == 0 && (stage == 0 || done[at(stage - 1, m)] >= 1)) {
      next = {stage, Kind::kForward, m};
      return true;
    }
    if (d == 1 && (last || done[at(stage + 1, m)] >= 2)) {
      next = {stage, split[at(stage, m)] ? Kind::kBackwardInput : Kind::kBackward, m};
      return true;
    }
    if (d == 2 && split[at(stage, m)]) {
      next = {stage, Kind::kBackwardWeight, m};
      return true;
    }
    return false;
  };
  for (;;) {
    std::vector<pp::Action> candidates;
    for (int stage = 0; stage < s.stages; ++stage) {
      for (int m = 0; m < s.microbatches; ++m) {
        pp::Action next;
        if (ready(stage, m, next)) candidates.push_back(next);
      }
    }
    if (candidates.empty()) break;
    const pp::Action a =
        candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(random)];
    ++done[at(a.stage, a.microbatch)];
    s.actions[static_cast<size_t>(s.stage_rank[static_cast<size_t>(a.stage)])].push_back(a);
  }
  pp::add_communication(s);
  return s;
}

}  // namespace loom::test
