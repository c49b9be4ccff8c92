#include "loom/train/autotune_session.h"

#include <ATen/Parallel.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/train/layout_factory.h"

namespace loom::train {
namespace {

// The settings tuned, in the order of the autotuner's values.
enum Setting { kLoaderThreads, kComputeThreads, kPrefetch, kBucketCap };
constexpr const char* kKeys[] = {"data.workers", "runtime.threads", "data.prefetch_batches",
                                 "parallel.bucket_cap_mb"};

// The first steps of a run fill the allocator's caches and let oneDNN pick its kernels; they say
// nothing about the settings (the trainer leaves as many out of its steady state).
constexpr int64_t kFirstWarmupSteps = 5;

// Bucket caps worth trying: each gives the model a different number of buckets.
std::vector<double> bucket_cap_candidates(const std::vector<parallel::GradientInfo>& gradients,
                                          double first_mb, double start_mb) {
  std::vector<int> order(gradients.size());  // as DataParallel first expects them: reversed
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(order.size() - 1 - i);
  auto buckets = [&](double cap_mb) {
    return parallel::plan_buckets(gradients, order, parallel::bucket_limits(first_mb, cap_mb))
        .size();
  };
  std::set<size_t> counts{buckets(start_mb)};
  std::vector<double> values{start_mb};
  for (double cap_mb : {2.0, 5.0, 10.0, 25.0, 50.0, 100.0}) {
    if (counts.insert(buckets(cap_mb)).second) values.push_back(cap_mb);
  }
  std::sort(values.begin(), values.end());
  return values;
}

// Whole numbers as integers, so that the YAML and JSON read like a hand-written config.
template <typename Out>
void put_value(Out&& out, double value) {
  if (value == std::floor(value) && std::abs(value) < 1e15) {
    out = static_cast<int64_t>(value);
  } else {
    out = value;
  }
}

nlohmann::ordered_json by_key(const std::vector<std::string>& keys,
                              const std::vector<double>& values) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (size_t i = 0; i < keys.size() && i < values.size(); ++i) put_value(out[keys[i]], values[i]);
  return out;
}

}  // namespace

AutotuneSession::AutotuneSession(const Config& config, int usable_cores, int64_t steps,
                                 const TunedSettings& start, data::BatchSource& loader,
                                 parallel::GradSync& grad_sync, comm::Communicator* communicator,
                                 const std::vector<parallel::GradientInfo>& gradients)
    : loader_(loader),
      grad_sync_(grad_sync),
      tune_buckets_(grad_sync.bucket_limits().has_value()),
      communicator_(communicator),
      first_bucket_mb_(config.parallel.first_bucket_mb),
      settings_(start) {
  const AutotuneConfig& a = config.autotune;
  if (a.max_share > 1) {
    throw ConfigError("config key 'autotune.max_share': " + std::to_string(a.max_share) +
                      " is more than the whole run (at most 1)");
  }
  // First how the cores are split between loader and compute threads (changing either alone can
  // only oversubscribe or starve them), then each alone to refine the split.
  using profile::TuningDimension;
  std::vector<TuningDimension> dimensions = {
      {{kKeys[kLoaderThreads], kKeys[kComputeThreads]},
       profile::thread_split_candidates(usable_cores)},
      TuningDimension::one(kKeys[kLoaderThreads], profile::loader_thread_candidates(usable_cores)),
      TuningDimension::one(kKeys[kComputeThreads],
                           profile::compute_thread_candidates(usable_cores)),
      TuningDimension::one(kKeys[kPrefetch], {2, 4, 8})};
  std::vector<std::string> keys(kKeys, kKeys + 3);
  std::vector<double> values = {double(start.loader_threads), double(start.compute_threads),
                                double(start.prefetch_batches)};
  if (tune_buckets_) {
    dimensions.push_back(TuningDimension::one(
        kKeys[kBucketCap],
        bucket_cap_candidates(gradients, first_bucket_mb_, start.bucket_cap_mb)));
    keys.push_back(kKeys[kBucketCap]);
    values.push_back(start.bucket_cap_mb);
  }

  profile::AutotuneOptions options;
  options.first_warmup_steps = kFirstWarmupSteps;
  options.warmup_steps = a.warmup_steps;
  options.sample_steps = a.sample_steps;
  options.sample_seconds = a.sample_seconds;
  options.samples = a.samples;
  options.min_gain = a.min_gain;
  options.max_steps = static_cast<int64_t>(a.max_share * static_cast<double>(steps));
  // Measuring the starting settings and one other value, at the least.
  const int64_t needed = kFirstWarmupSteps + a.warmup_steps + 2 * a.samples * a.sample_steps;
  if (options.max_steps < needed) {
    skipped_ = "the run's " + std::to_string(steps) + " steps leave " +
               std::to_string(options.max_steps) + " for tuning (autotune.max_share), fewer than " +
               "the " + std::to_string(needed) + " it needs to compare two settings";
    LOOM_LOG(kWarn, "autotune") << "not tuning: " << skipped_;
    return;
  }
  tuner_ = std::make_unique<profile::Autotuner>(std::move(keys), std::move(values),
                                                std::move(dimensions), options);
}

AutotuneSession::AutotuneSession(const Config& config, const profile::AutotuneResult& earlier,
                                 const TunedSettings& start, data::BatchSource& loader,
                                 parallel::GradSync& grad_sync)
    : loader_(loader),
      grad_sync_(grad_sync),
      tune_buckets_(grad_sync.bucket_limits().has_value()),
      first_bucket_mb_(config.parallel.first_bucket_mb),
      earlier_(earlier),
      settings_(start) {
  std::vector<double> values = {double(start.loader_threads), double(start.compute_threads),
                                double(start.prefetch_batches), start.bucket_cap_mb};
  for (size_t i = 0; i < earlier.keys.size() && i < earlier.chosen.size(); ++i) {
    const auto* key = std::find(std::begin(kKeys), std::end(kKeys), earlier.keys[i]);
    if (key != std::end(kKeys))
      values[static_cast<size_t>(key - std::begin(kKeys))] = earlier.chosen[i];
  }
  apply(values);
}

void AutotuneSession::after_step(int64_t samples, double seconds) {
  if (!tuning()) return;
  if (communicator_) {
    // Rank 0's step time decides for all; synchronous steps take about as long on every rank.
    at::Tensor shared = at::tensor({seconds}, at::kDouble);
    auto& comm = *communicator_;
    comm.broadcast(shared, 0)->wait(comm.options().timeout);
    seconds = shared.item<double>();
  }
  if (tuner_->record_step(samples, seconds)) apply(tuner_->settings());
  if (tuner_->done()) {
    const auto& r = tuner_->result();
    LOOM_LOG(kDebug, "autotune") << "done after " << r.steps << " steps and " << r.trials.size()
                                 << " trials: " << r.chosen_score << " samples/s, " << r.start_score
                                 << " at the start";
  }
}

void AutotuneSession::apply(const std::vector<double>& values) {
  TunedSettings next = settings_;
  next.loader_threads = static_cast<int>(values[kLoaderThreads]);
  next.compute_threads = static_cast<int>(values[kComputeThreads]);
  next.prefetch_batches = static_cast<int>(values[kPrefetch]);
  if (tune_buckets_) next.bucket_cap_mb = values[kBucketCap];

  if (next.loader_threads != settings_.loader_threads) loader_.set_threads(next.loader_threads);
  if (next.compute_threads != settings_.compute_threads) at::set_num_threads(next.compute_threads);
  if (next.prefetch_batches != settings_.prefetch_batches) {
    loader_.set_prefetch_batches(next.prefetch_batches);
  }
  if (tune_buckets_ && next.bucket_cap_mb != settings_.bucket_cap_mb) {
    grad_sync_.set_bucket_limits(parallel::bucket_limits(first_bucket_mb_, next.bucket_cap_mb));
  }
  settings_ = next;
  LOOM_LOG(kDebug, "autotune") << "loader threads " << next.loader_threads << ", compute threads "
                               << next.compute_threads << ", prefetch " << next.prefetch_batches
                               << (tune_buckets_ ? ", bucket cap " : "")
                               << (tune_buckets_ ? std::to_string(next.bucket_cap_mb) : "");
}

nlohmann::ordered_json autotune_json(const profile::AutotuneResult& r) {
  nlohmann::ordered_json trials = nlohmann::ordered_json::array();
  for (const auto& t : r.trials) {
    trials.push_back({{"varied", t.key.empty() ? "start" : t.key},
                      {"recheck", t.recheck},
                      {"settings", by_key(r.keys, t.settings)},
                      {"samples_per_second", t.sample_rates},
                      {"score", t.score}});
  }
  return {{"complete", r.complete},
          {"steps", r.steps},
          {"seconds", r.seconds},
          {"start", by_key(r.keys, r.start)},
          {"chosen", by_key(r.keys, r.chosen)},
          {"start_samples_per_second", r.start_score},
          {"chosen_samples_per_second", r.chosen_score},
          {"trials", trials}};
}

profile::AutotuneResult autotune_from_json(const nlohmann::ordered_json& j) {
  profile::AutotuneResult r;
  for (const auto& [key, value] : j.at("start").items()) {
    r.keys.push_back(key);
    r.start.push_back(value.get<double>());
    r.chosen.push_back(j.at("chosen").at(key).get<double>());
  }
  r.complete = j.at("complete").get<bool>();
  r.steps = j.at("steps").get<int64_t>();
  r.seconds = j.at("seconds").get<double>();
  r.start_score = j.at("start_samples_per_second").get<double>();
  r.chosen_score = j.at("chosen_samples_per_second").get<double>();
  for (const auto& t : j.at("trials")) {
    profile::TuningTrial trial;
    const auto varied = t.at("varied").get<std::string>();
    trial.key = varied == "start" ? "" : varied;
    trial.recheck = t.at("recheck").get<bool>();
    for (const auto& key : r.keys) trial.settings.push_back(t.at("settings").at(key).get<double>());
    trial.sample_rates = t.at("samples_per_second").get<std::vector<double>>();
    trial.score = t.at("score").get<double>();
    r.trials.push_back(std::move(trial));
  }
  return r;
}

std::string autotune_yaml(const profile::AutotuneResult& r, const std::string& machine) {
  YAML::Node root;
  for (size_t i = 0; i < r.keys.size(); ++i) {
    const std::string& key = r.keys[i];
    const size_t dot = key.find('.');
    put_value(root[key.substr(0, dot)][key.substr(dot + 1)], r.chosen[i]);
  }
  YAML::Emitter out;
  out << root;
  char scores[160];
  std::snprintf(scores, sizeof scores,
                "# %.1f samples/s with these values, %.1f with the starting ones", r.chosen_score,
                r.start_score);
  return "# Chosen by `loom train --autotune` on " + machine + ".\n" + scores +
         (r.complete ? "" : " (stopped at autotune.max_share before trying every value)") +
         ";\n# every trial is in summary.json. Give it after your config (loom train my.yaml "
         "autotune.yaml)\n# or copy its keys.\n" +
         out.c_str() + "\n";
}

}  // namespace loom::train
