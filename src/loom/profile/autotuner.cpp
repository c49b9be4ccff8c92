#include "loom/profile/autotuner.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void add_unique(std::vector<double>& values, double v) {
  if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
}

}  // namespace

Autotuner::Autotuner(std::vector<TuningDimension> dimensions, std::vector<double> start,
                     AutotuneOptions options)
    : dimensions_(std::move(dimensions)), options_(options), best_(start), current_(start) {
  if (start.size() != dimensions_.size()) {
    throw Error("autotuner: " + std::to_string(start.size()) + " starting values for " +
                std::to_string(dimensions_.size()) + " settings");
  }
  if (options_.samples < 1 || options_.sample_steps < 1) {
    throw Error("autotuner: needs at least one sample of at least one step");
  }
  for (const auto& d : dimensions_) result_.keys.push_back(d.key);
  result_.start = start;
  trial_.settings = start;  // the first trial measures the starting settings
  warmup_left_ = options_.first_warmup_steps;
  if (dimensions_.empty()) conclude();
}

bool Autotuner::record_step(int64_t samples, double seconds) {
  if (done_) return false;
  const std::vector<double> before = current_;
  ++result_.steps;
  result_.seconds += seconds;
  if (warmup_left_ > 0) {
    --warmup_left_;
  } else {
    ++sample_steps_;
    sample_samples_ += samples;
    sample_seconds_ += seconds;
    if (sample_steps_ >= options_.sample_steps && sample_seconds_ >= options_.sample_seconds) {
      trial_.sample_rates.push_back(sample_seconds_ > 0 ? sample_samples_ / sample_seconds_ : 0);
      sample_steps_ = sample_samples_ = 0;
      sample_seconds_ = 0;
      if (static_cast<int64_t>(trial_.sample_rates.size()) == options_.samples) {
        finish_trial();
        next_trial();
      }
    }
  }
  // Out of steps: keep what has been measured, drop the trial under way.
  if (!done_ && options_.max_steps > 0 && result_.steps >= options_.max_steps) conclude();
  return current_ != before;
}

void Autotuner::finish_trial() {
  trial_.score = median(trial_.sample_rates);
  result_.trials.push_back(trial_);
  if (trial_.key.empty()) {
    best_score_ = result_.start_score = trial_.score;
  } else if (trial_.score > dimension_best_score_) {
    dimension_best_ = trial_.settings;
    dimension_best_score_ = trial_.score;
  }
}

void Autotuner::next_trial() {
  while (dimension_ < dimensions_.size()) {
    const TuningDimension& d = dimensions_[dimension_];
    while (candidate_ < d.values.size()) {
      const double value = d.values[candidate_++];
      if (value == best_[dimension_]) continue;  // measured already
      current_ = best_;
      current_[dimension_] = value;
      trial_ = TuningTrial{d.key, current_, {}, 0};
      warmup_left_ = options_.warmup_steps;
      return;
    }
    // The dimension is done: adopt its best value if it clearly beats the current one.
    if (dimension_best_score_ > best_score_ * (1 + options_.min_gain)) {
      best_ = dimension_best_;
      best_score_ = dimension_best_score_;
    }
    dimension_best_score_ = 0;
    ++dimension_;
    candidate_ = 0;
  }
  result_.complete = true;
  conclude();
}

void Autotuner::conclude() {
  // Stopped early: what the unfinished dimension measured still counts.
  if (!result_.complete && dimension_best_score_ > best_score_ * (1 + options_.min_gain)) {
    best_ = dimension_best_;
    best_score_ = dimension_best_score_;
  }
  if (dimensions_.empty()) result_.complete = true;
  done_ = true;
  current_ = best_;
  result_.chosen = best_;
  result_.chosen_score = best_score_;
}

std::vector<double> loader_thread_candidates(int cores) {
  std::vector<double> values;
  for (int n = 1; n < cores; n *= 2) values.push_back(n);
  add_unique(values, std::max(1, cores));
  return values;
}

std::vector<double> compute_thread_candidates(int cores) {
  std::vector<double> values;
  for (double share : {1.0, 0.75, 0.5, 0.25}) {
    add_unique(values, std::max(1.0, std::round(share * cores)));
  }
  return values;
}

}  // namespace loom::profile
