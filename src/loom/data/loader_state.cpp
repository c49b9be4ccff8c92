#include "loom/data/loader_state.h"

#include "loom/core/error.h"

namespace loom::data {

void check_same_sequence(const LoaderState& saved, const LoaderState& now,
                         const std::string& checkpoint) {
  // Fields: the checkpoint's `path`, the `problem` (which quantity differs), its `value` in the
  // checkpoint and the `expected` one now.
  auto fields = [&](const char* problem, int64_t then, int64_t current) {
    return ErrorFields{{"path", checkpoint},
                       {"problem", problem},
                       {"value", std::to_string(then)},
                       {"expected", std::to_string(current)}};
  };
  auto differs = [&](const char* what, const char* problem, int64_t then, int64_t current) {
    if (then == current) return;
    throw DataError("checkpoint '" + checkpoint + "': the data " + what + " was " +
                        std::to_string(then) + " when it was written and is " +
                        std::to_string(current) +
                        " now, so resuming would not see the same samples; start a new run "
                        "(without --resume) or restore the data",
                    fields(problem, then, current));
  };
  differs("set size", "samples", saved.samples, now.samples);
  differs("order seed", "seed", static_cast<int64_t>(saved.seed), static_cast<int64_t>(now.seed));
  if (saved.batch > 0 && now.batch > 0) {
    const int64_t then = saved.batch * saved.world, current = now.batch * now.world;
    if (then != current && saved.world == now.world) {
      differs("batch size per rank", "batch", saved.batch, now.batch);
    }
    if (then != current) {
      throw DataError("checkpoint '" + checkpoint + "': the global batch was " +
                          std::to_string(then) + " (" + std::to_string(saved.world) + " x " +
                          std::to_string(saved.batch) + ") when it was written and is " +
                          std::to_string(current) + " (" + std::to_string(now.world) + " x " +
                          std::to_string(now.batch) +
                          ") now, so resuming would not see the same samples; set "
                          "data.global_batch to keep it when the number of ranks changes",
                      fields("global_batch", then, current));
    }
  } else {
    differs("world size", "world", saved.world, now.world);
    differs("rank", "rank", saved.rank, now.rank);
  }
  differs("batches per epoch", "steps_per_epoch", saved.steps_per_epoch, now.steps_per_epoch);
}

}  // namespace loom::data
