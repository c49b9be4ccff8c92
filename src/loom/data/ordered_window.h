// The batches a source prepares ahead of its consumer: one bounded, ordered window shared by the
// local Loader and the RemoteBatchSource.
//
// Batches are numbered by their position in an endless run of epochs (epoch * steps_per_epoch +
// step), so producers go on into the next epoch while the consumer finishes one, and an epoch
// boundary costs the consumer no wait. Producers claim the lowest position that nobody holds
// among the first `ahead` from the consumer's, then deliver its batch or give it back (a
// remote worker that failed); the consumer takes positions in order. When the consumer moves
// anywhere but its next position (seek, set_epoch, a resume), everything prepared is dropped and
// claims made before are stale: a generation count tells them apart.
//
// Threading: not synchronised. BatchWindow calls every method under its mutex and wakes the
// threads that wait on it.
#pragma once

#include <cstdint>
#include <climits>
#include <exception>
#include <map>
#include <optional>

#include "loom/data/batch_source.h"

namespace loom::data {

class OrderedWindow {
 public:
  // A producer's hold on one position.
  struct Claim {
    uint64_t generation = 0;
    int64_t position = 0;
    int64_t epoch = 0, step = 0;
  };
  enum class State { kWaiting, kClaimed, kReady };
  struct Slot {
    State state = State::kWaiting;
    int producer = 0;  // who claimed or delivered it (the owner's numbering)
    Batch batch;
    std::exception_ptr error;
    LoaderStats counts;  // of the batch's samples, counted when the consumer takes it
  };

  explicit OrderedWindow(int64_t steps_per_epoch);

  // The consumer stands at (epoch, step) and wants that batch next. Unless that is where it
  // already stood, prepared batches are dropped and earlier claims go stale. Returns whether it
  // moved.
  bool move_to(int64_t epoch, int64_t step);
  // move_to(), and the consumer now waits for that batch: it is built even past the epoch limit.
  bool ask(int64_t epoch, int64_t step);
  bool started() const { return next_ >= 0; }
  // Nothing from epoch `epochs` on is claimed ahead of the consumer (a test set read as epoch 0
  // again and again, a run's last epoch), only a batch it asked for; default: no end.
  void set_epoch_limit(int64_t epochs) { end_ = epochs * steps_; }

  // The lowest position among the `ahead` from the consumer's that nobody holds, now claimed by
  // `producer`; nullopt when there is none (or the consumer has not started).
  std::optional<Claim> claim(int producer, int64_t ahead);
  // Stores the batch of a claim. False, storing nothing, when the claim is stale or another
  // producer delivered that position first (a duplicate).
  bool deliver(const Claim& claim, int producer, Batch batch, std::exception_ptr error,
               const LoaderStats& counts);
  // Lets another producer take the claim's position (this one failed to build it).
  void give_back(const Claim& claim, int producer);
  // Whether the consumer moved elsewhere since the claim was made.
  bool stale(const Claim& claim) const { return claim.generation != generation_; }

  // Whether the consumer's next batch is ready; its slot, when anyone touched it.
  bool next_ready() const;
  const Slot* next_slot() const;
  // Takes the consumer's next batch (next_ready() must hold) and moves the consumer on.
  Slot take();

  int ready() const;  // batches delivered and not yet taken
  int64_t epoch_of(int64_t position) const { return position / steps_; }
  int64_t step_of(int64_t position) const { return position % steps_; }

 private:
  int64_t steps_;
  int64_t next_ = -1;  // the consumer's next position; -1 before the first move_to()
  int64_t end_ = INT64_MAX;
  bool asked_ = false;  // the consumer waits for next_
  uint64_t generation_ = 0;
  std::map<int64_t, Slot> slots_;  // positions claimed or ready, from next_ on
};

}  // namespace loom::data
