#include "loom/train/best_checkpoint.h"

#include "loom/core/error.h"
#include "loom/train/evaluate.h"

namespace loom::train {

KeepBest::KeepBest(std::string metric) : metric_(std::move(metric)) {
  if (metric_ == "test_accuracy") {
    higher_is_better_ = true;
  } else if (metric_ != "test_loss" && metric_ != "test_perplexity") {
    throw ConfigError::at_key("checkpoint.keep_best",
                              "'" + metric_ +
                                  "' is not a metric evaluation produces (test_loss, "
                                  "test_accuracy, test_perplexity)",
                              {{"value", metric_}});
  }
}

double KeepBest::value_of(const EvalResult& result) const {
  if (metric_ == "test_accuracy") return result.accuracy;
  if (metric_ == "test_perplexity") return result.perplexity();
  return result.loss;
}

bool KeepBest::improves(double value) const {
  if (!best_) return true;
  return higher_is_better_ ? value > best_->value : value < best_->value;
}

BestCheckpoint KeepBest::record(int64_t step, const std::string& path, double value) const {
  return {path, step, metric_, value};
}

void KeepBest::resume(const BestCheckpoint& best) {
  if (best.metric == metric_) best_ = best;
}

std::optional<BestCheckpoint> KeepBest::evaluated(int64_t step, double value) {
  if (!improves(value)) return std::nullopt;
  if (step == committed_step_) {
    best_ = record(step, committed_path_, value);
    return best_;
  }
  waiting_[step] = value;
  return std::nullopt;
}

std::optional<BestCheckpoint> KeepBest::committed(int64_t step, const std::string& path) {
  committed_step_ = step;
  committed_path_ = path;
  std::optional<BestCheckpoint> out;
  // Checkpoints commit in step order (one writer, one write at a time).
  if (const auto it = waiting_.find(step); it != waiting_.end() && improves(it->second)) {
    best_ = record(step, path, it->second);
    out = best_;
  }
  waiting_.erase(waiting_.begin(), waiting_.upper_bound(step));
  return out;
}

}  // namespace loom::train
