// checkpoint.keep_best: which committed checkpoint holds the best evaluation so far, so that
// pruning (checkpoint.keep) spares it. Its record, best.json beside `latest`, says so durably: a
// resumed run goes on comparing against it and keeps sparing it.
//
// An evaluation and the checkpoint of its step arrive in either order: at an epoch's end the
// evaluation comes first and the checkpoint is committed after it (at once, or by a background
// write some steps later); under checkpoint.every_steps a save at that very step may have been
// committed before. KeepBest pairs them by step. A checkpoint is written at every evaluation's
// step (the trainer saves there when keep_best is on), so each evaluation has one, unless that
// save failed (checkpoint.on_error: warn): then that evaluation cannot be kept and is dropped.
//
// Threading: one thread (the training thread of the rank that writes the checkpoints).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace loom::train {

struct EvalResult;

// The best evaluation's checkpoint: its path, the step, checkpoint.keep_best's metric and its
// value there.
struct BestCheckpoint {
  std::string path;
  int64_t step = 0;
  std::string metric;  // test_loss | test_accuracy | test_perplexity
  double value = 0;
};

class KeepBest {
 public:
  // `metric`: checkpoint.keep_best (not "none"). Throws ConfigError naming the key for another.
  explicit KeepBest(std::string metric);

  const std::string& metric() const { return metric_; }
  // The metric's value in an evaluation.
  double value_of(const EvalResult& result) const;

  // A resumed run's best so far (best.json), when it was ranked by this metric; ignored if not.
  void resume(const BestCheckpoint& best);
  // The evaluation at `step` gave `value`. Returns the new best when it beats the best so far and
  // its step's checkpoint is already committed; otherwise it waits for that checkpoint.
  std::optional<BestCheckpoint> evaluated(int64_t step, double value);
  // The checkpoint of `step` is committed at `path`. Returns the new best when that step's
  // evaluation beats the best so far. Evaluations of earlier steps still waiting never got a
  // checkpoint of their own (a failed save): they are dropped.
  std::optional<BestCheckpoint> committed(int64_t step, const std::string& path);

  const std::optional<BestCheckpoint>& best() const { return best_; }

 private:
  // Whether `value` beats the best so far (strictly: a tie keeps the earlier checkpoint).
  bool improves(double value) const;
  BestCheckpoint record(int64_t step, const std::string& path, double value) const;

  std::string metric_;
  bool higher_is_better_ = false;
  std::optional<BestCheckpoint> best_;
  std::map<int64_t, double> waiting_;  // evaluations that improve, by step, without a checkpoint
  int64_t committed_step_ = -1;        // the newest committed checkpoint this run made
  std::string committed_path_;
};

}  // namespace loom::train
