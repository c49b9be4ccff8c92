// Tunes a few settings of a running job by measuring it: one setting at a time (coordinate
// descent), each candidate value runs for some warm-up steps and then a few short samples, and
// its score is the median of the samples' samples/s (medians because a shared machine is
// noisy). A candidate replaces the current value only when it beats it by `min_gain`, so noise
// alone does not move a setting away from where the user put it.
//
// The autotuner never touches the job itself: the caller reports each finished step and applies
// settings() whenever record_step() says they changed. Its decisions depend only on what it is
// told, so ranks fed the same step times decide the same.
//
// Threading: one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::profile {

// One tunable setting: its configuration key and the values worth trying.
struct TuningDimension {
  std::string key;             // e.g. data.workers
  std::vector<double> values;  // candidates; the starting value need not be among them
};

struct AutotuneOptions {
  int64_t first_warmup_steps = 5;  // before the first measurement (allocator, oneDNN warm-up)
  int64_t warmup_steps = 2;        // after each change, not measured
  int64_t sample_steps = 5;        // a sample is at least this many steps
  double sample_seconds = 0.2;     // ... and at least this long
  int64_t samples = 3;             // per candidate; the score is their median
  double min_gain = 0.03;          // a candidate must beat the current score by this share
  int64_t max_steps = 0;           // stop (keeping the best so far) after this many; 0 = no cap
};

struct TuningTrial {
  std::string key;                   // the dimension varied ("" for the starting settings)
  std::vector<double> settings;      // all dimensions' values during the trial
  std::vector<double> sample_rates;  // samples/s of each sample
  double score = 0;                  // their median
};

struct AutotuneResult {
  std::vector<std::string> keys;
  std::vector<double> start, chosen;  // per key
  double start_score = 0, chosen_score = 0;
  std::vector<TuningTrial> trials;  // in the order they ran
  int64_t steps = 0;                // steps spent tuning
  double seconds = 0;
  bool complete = false;  // false: stopped by max_steps before every candidate was tried
};

class Autotuner {
 public:
  Autotuner(std::vector<TuningDimension> dimensions, std::vector<double> start,
            AutotuneOptions options);

  // The values the next step should run with, one per dimension.
  const std::vector<double>& settings() const { return current_; }
  // A step ran `samples` samples in `seconds` with settings(). Returns true when settings()
  // changed and must be applied before the next step.
  bool record_step(int64_t samples, double seconds);
  bool done() const { return done_; }
  const AutotuneResult& result() const { return result_; }

 private:
  // Moves to the next candidate, or ends the search; sets current_.
  void next_trial();
  void finish_trial();
  void conclude();

  std::vector<TuningDimension> dimensions_;
  AutotuneOptions options_;
  std::vector<double> best_;  // the settings adopted so far
  double best_score_ = 0;
  std::vector<double> current_;
  size_t dimension_ = 0;  // the one being varied
  size_t candidate_ = 0;  // next index into its values
  // Best candidate of the current dimension.
  std::vector<double> dimension_best_;
  double dimension_best_score_ = 0;
  // The trial under way.
  TuningTrial trial_;
  int64_t warmup_left_ = 0;
  int64_t sample_steps_ = 0, sample_samples_ = 0;
  double sample_seconds_ = 0;
  bool done_ = false;
  AutotuneResult result_;
};

// The candidate values for the thread settings of a process that may use `cores` cores: loader
// threads 1, 2, 4, ... up to the cores; compute threads at 1, 3/4, 1/2 and 1/4 of the cores.
std::vector<double> loader_thread_candidates(int cores);
std::vector<double> compute_thread_candidates(int cores);

}  // namespace loom::profile
