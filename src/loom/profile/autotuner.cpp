#include "loom/profile/autotuner.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/median.h"

namespace loom::profile {
namespace {

void add_unique(std::vector<double>& values, double v) {
  if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
}

}  // namespace

TuningDimension TuningDimension::one(std::string key, const std::vector<double>& values) {
  TuningDimension d;
  d.keys = {std::move(key)};
  for (double v : values) d.candidates.push_back({v});
  return d;
}

std::string TuningDimension::name() const {
  std::string joined;
  for (const auto& k : keys) joined += (joined.empty() ? "" : "+") + k;
  return joined;
}

Autotuner::Autotuner(std::vector<std::string> keys, std::vector<double> start,
                     std::vector<TuningDimension> dimensions, AutotuneOptions options)
    : dimensions_(std::move(dimensions)), options_(options), best_(start), current_(start) {
  if (start.size() != keys.size()) {
    throw Error("autotuner: " + std::to_string(start.size()) + " starting values for " +
                std::to_string(keys.size()) + " settings");
  }
  if (options_.samples < 1 || options_.sample_steps < 1) {
    throw Error("autotuner: needs at least one sample of at least one step");
  }
  for (const auto& d : dimensions_) {
    std::vector<size_t> at;
    for (const auto& k : d.keys) {
      const auto it = std::find(keys.begin(), keys.end(), k);
      if (it == keys.end()) throw Error("autotuner: dimension " + d.name() + ": no setting " + k);
      at.push_back(static_cast<size_t>(it - keys.begin()));
    }
    for (const auto& c : d.candidates) {
      if (c.size() != at.size()) {
        throw Error("autotuner: dimension " + d.name() + ": a candidate has " +
                    std::to_string(c.size()) + " values");
      }
    }
    indices_.push_back(std::move(at));
  }
  result_.keys = std::move(keys);
  result_.start = start;
  trial_.settings = start;  // the first trial measures the starting settings
  warmup_left_ = options_.first_warmup_steps;
  if (dimensions_.empty()) {  // nothing to try
    result_.complete = true;
    conclude();
  }
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
  // Out of steps: keep the changes confirmed so far; the setting under way keeps its value.
  if (!done_ && options_.max_steps > 0 && result_.steps >= options_.max_steps) conclude();
  return current_ != before;
}

void Autotuner::finish_trial() {
  trial_.score = median(trial_.sample_rates);
  result_.trials.push_back(trial_);
  if (trial_.recheck) {
    recheck_score_ = trial_.score;
    return;
  }
  measured_[trial_.settings] = trial_.score;
  if (trial_.key.empty()) {
    best_score_ = result_.start_score = trial_.score;
  } else {
    consider(trial_.settings, trial_.score);
  }
}

void Autotuner::consider(const std::vector<double>& settings, double score) {
  if (score > dimension_best_score_) {
    dimension_best_ = settings;
    dimension_best_score_ = score;
  }
}

void Autotuner::next_trial() {
  while (dimension_ < dimensions_.size()) {
    const TuningDimension& d = dimensions_[dimension_];
    while (candidate_ < d.candidates.size()) {
      std::vector<double> settings = best_;
      const std::vector<double>& values = d.candidates[candidate_++];
      for (size_t i = 0; i < values.size(); ++i) settings[indices_[dimension_][i]] = values[i];
      if (settings == best_) continue;
      // Tried in another dimension already: its score stands (another run costs steps).
      const auto seen = measured_.find(settings);
      if (seen != measured_.end()) {
        consider(settings, seen->second);
        continue;
      }
      current_ = std::move(settings);
      start_trial(d.name(), false);
      return;
    }
    // The dimension is done. A value that looks clearly faster is adopted only if it also beats
    // the current settings measured again now.
    const bool promising = dimension_best_score_ > best_score_ * (1 + options_.min_gain);
    if (promising && !rechecked_) {
      current_ = best_;
      start_trial(d.name(), true);
      rechecked_ = true;
      return;
    }
    if (promising && dimension_best_score_ > recheck_score_ * (1 + options_.min_gain)) {
      best_ = dimension_best_;
      best_score_ = dimension_best_score_;
    } else if (rechecked_) {
      best_score_ = std::max(best_score_, recheck_score_);
    }
    dimension_best_score_ = recheck_score_ = 0;
    rechecked_ = false;
    ++dimension_;
    candidate_ = 0;
  }
  result_.complete = true;
  conclude();
}

void Autotuner::start_trial(const std::string& key, bool recheck) {
  trial_ = TuningTrial{key, recheck, current_, {}, 0};
  warmup_left_ = options_.warmup_steps;
}

void Autotuner::conclude() {
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

std::vector<std::vector<double>> thread_split_candidates(int cores) {
  std::vector<std::vector<double>> splits;
  for (double compute : compute_thread_candidates(cores)) {
    splits.push_back({std::max(1.0, cores - compute + 1), compute});
  }
  return splits;
}

std::vector<double> compute_thread_candidates(int cores) {
  std::vector<double> values;
  for (double share : {1.0, 0.75, 0.5, 0.25}) {
    add_unique(values, std::max(1.0, std::round(share * cores)));
  }
  return values;
}

}  // namespace loom::profile
