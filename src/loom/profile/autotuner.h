// Tunes a few settings of a running job by measuring it: one dimension at a time (coordinate
// descent) — a setting, or settings that trade against each other, such as loader and compute
// threads sharing the cores — each candidate runs for some warm-up steps and then a few short
// samples, and
// its score is the median of the samples' samples/s (medians because a shared machine is
// noisy). A candidate replaces the current value only when it beats it by `min_gain`, so noise
// alone does not move a setting away from where the user put it. And because a machine's speed
// drifts (caches warm, neighbours come and go), the current settings are measured again right
// after a promising candidate, and the candidate must beat both measurements.
//
// The autotuner never touches the job itself: the caller reports each finished step and applies
// settings() whenever record_step() says they changed. Its decisions depend only on what it is
// told, so ranks fed the same step times decide the same.
//
// Threading: one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::profile {

// Settings varied together (usually one) and the candidates worth trying, a value per key each.
// The starting values need not be among them; settings measured before are not run again.
struct TuningDimension {
  std::vector<std::string> keys;                // e.g. {data.workers}
  std::vector<std::vector<double>> candidates;  // e.g. {{1}, {2}, {4}}
  // One key with one value per candidate.
  static TuningDimension one(std::string key, const std::vector<double>& values);
  std::string name() const;  // the keys joined by "+"
};

struct AutotuneOptions {
  int64_t first_warmup_steps = 5;  // before the first measurement (allocator, oneDNN warm-up)
  int64_t warmup_steps = 2;        // after each change, not measured
  int64_t sample_steps = 5;        // a sample is at least this many steps
  double sample_seconds = 0.2;     // ... and at least this long
  int64_t samples = 3;             // per candidate; the score is their median
  double min_gain = 0.03;          // a candidate must beat the current score by this share
  int64_t max_steps = 0;  // stop after this many steps, keeping the changes confirmed; 0 = no cap
};

struct TuningTrial {
  std::string key;                   // the dimension's name ("" for the starting settings)
  bool recheck = false;              // the current settings, measured again
  std::vector<double> settings;      // every key's value during the trial
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
  bool complete = false;  // false: stopped by max_steps; the unfinished setting kept its value
};

class Autotuner {
 public:
  // `keys` and `start`: every setting and its value now. Throws Error for a dimension naming a
  // key not among them, or a candidate with the wrong number of values.
  Autotuner(std::vector<std::string> keys, std::vector<double> start,
            std::vector<TuningDimension> dimensions, AutotuneOptions options);

  // The values the next step should run with, one per key.
  const std::vector<double>& settings() const { return current_; }
  // A step ran `samples` samples in `seconds` with settings(). Returns true when settings()
  // changed and must be applied before the next step.
  bool record_step(int64_t samples, double seconds);
  bool done() const { return done_; }
  const AutotuneResult& result() const { return result_; }

 private:
  // Moves to the next candidate, or ends the search; sets current_.
  void next_trial();
  void start_trial(const std::string& key, bool recheck);
  void finish_trial();
  // A candidate of the current dimension scored `score`.
  void consider(const std::vector<double>& settings, double score);
  void conclude();

  std::vector<TuningDimension> dimensions_;
  std::vector<std::vector<size_t>> indices_;        // per dimension: its keys' positions
  std::map<std::vector<double>, double> measured_;  // scores of the settings tried (not rechecks)
  AutotuneOptions options_;
  std::vector<double> best_;  // the settings adopted so far
  double best_score_ = 0;
  std::vector<double> current_;
  size_t dimension_ = 0;  // the one being varied
  size_t candidate_ = 0;  // next index into its values
  // Best candidate of the current dimension, and the current settings measured again.
  std::vector<double> dimension_best_;
  double dimension_best_score_ = 0;
  bool rechecked_ = false;
  double recheck_score_ = 0;
  // The trial under way.
  TuningTrial trial_;
  int64_t warmup_left_ = 0;
  int64_t sample_steps_ = 0, sample_samples_ = 0;
  double sample_seconds_ = 0;
  bool done_ = false;
  AutotuneResult result_;
};

// The candidate values for the thread settings of a process that may use `cores` cores: loader
// threads 1, 2, 4, ... up to the cores; compute threads at 1, 3/4, 1/2 and 1/4 of the cores;
// and splits of the cores between them, {loader, compute}: the loader gets what compute leaves
// plus one (loader threads also wait, for queue slots and files), so {1, 2} and {2, 1} on 2.
std::vector<double> loader_thread_candidates(int cores);
std::vector<double> compute_thread_candidates(int cores);
std::vector<std::vector<double>> thread_split_candidates(int cores);

}  // namespace loom::profile
