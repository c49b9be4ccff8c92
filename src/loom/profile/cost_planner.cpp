#include "loom/profile/cost_planner.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

double read_number(const YAML::Node& entry, const std::string& where, const char* key,
                   bool required) {
  const YAML::Node value = entry[key];
  if (!value) {
    if (required) throw ConfigError(where + "." + key + ": missing");
    return 0;
  }
  double number;
  try {
    number = value.as<double>();
  } catch (const YAML::Exception&) {
    throw ConfigError(where + "." + key + ": expected a number, got '" +
                      value.as<std::string>("?") + "'");
  }
  if (!(number >= 0)) throw ConfigError(where + "." + key + ": must not be negative");
  return number;
}

}  // namespace

std::vector<InstanceType> parse_prices(const std::string& yaml_text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not YAML: " + e.what());
  }
  const YAML::Node list = root["instances"];
  if (!list || !list.IsSequence() || list.size() == 0) {
    throw ConfigError(origin + ": expected a non-empty list under 'instances'");
  }
  std::vector<InstanceType> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    const std::string where = origin + ": instances[" + std::to_string(i) + "]";
    if (!entry.IsMap() || !entry["name"]) throw ConfigError(where + ".name: missing");
    InstanceType t;
    t.name = entry["name"].as<std::string>();
    t.vcpus = static_cast<int>(read_number(entry, where, "vcpus", true));
    t.gpus = static_cast<int>(read_number(entry, where, "gpus", false));
    t.price_per_hour = read_number(entry, where, "price_per_hour", true);
    t.spot_price_per_hour = read_number(entry, where, "spot_price_per_hour", false);
    t.samples_per_second = read_number(entry, where, "samples_per_second", false);
    if (t.vcpus < 1) throw ConfigError(where + ".vcpus: must be at least 1");
    if (t.price_per_hour <= 0) throw ConfigError(where + ".price_per_hour: must be positive");
    out.push_back(t);
  }
  return out;
}

double InstanceEstimate::samples_per_dollar() const {
  return samples_per_second ? 3600 * *samples_per_second / instance.price_per_hour : 0;
}

double InstanceEstimate::hours_for(double samples) const {
  return samples_per_second && *samples_per_second > 0 ? samples / *samples_per_second / 3600 : 0;
}

double InstanceEstimate::cost_for(double samples) const {
  return hours_for(samples) * instance.price_per_hour;
}

double InstanceEstimate::spot_cost_for(double samples) const {
  return hours_for(samples) * instance.spot_price_per_hour;
}

std::vector<InstanceEstimate> estimate_instances(const RunMeasurement& run,
                                                 const std::vector<InstanceType>& instances) {
  std::vector<InstanceEstimate> out;
  for (const auto& t : instances) {
    InstanceEstimate e{t, std::nullopt, ""};
    if (t.samples_per_second > 0) {
      e.samples_per_second = t.samples_per_second;
      e.basis = "measured";
    } else if (t.gpus > 0) {
      e.basis = "not estimated: a CPU run cannot predict an accelerator (give samples_per_second)";
    } else if (run.usable_cores > 0) {
      // CPU training and its input pipeline both scale with cores, to a first approximation.
      e.samples_per_second = run.samples_per_second * t.vcpus / run.usable_cores;
      e.basis = "scaled by vCPUs (" + std::to_string(t.vcpus) + "/" +
                std::to_string(run.usable_cores) + ")";
    }
    out.push_back(e);
  }
  return out;
}

double WhatIfRow::samples_per_dollar() const {
  return price_per_hour > 0 ? 3600 * samples_per_second / price_per_hour : 0;
}

double WhatIfRow::spot_samples_per_dollar() const {
  return spot_price_per_hour > 0 ? 3600 * samples_per_second / spot_price_per_hour : 0;
}

WhatIf heterogeneous_what_if(const RunMeasurement& run, const InstanceEstimate& trainer,
                             const InstanceType& worker) {
  if (!trainer.samples_per_second) {
    throw ConfigError("plan: no throughput for trainer '" + trainer.instance.name +
                      "': " + trainer.basis);
  }
  if (run.cpu_seconds_per_sample <= 0) {
    throw ConfigError(
        "plan: the run measured no input-pipeline CPU time, so CPU instances "
        "cannot be priced (was it trained before Loom measured it?)");
  }
  WhatIf w;
  const double rate = *trainer.samples_per_second;
  // Waiting for data was the gap between what the model can do and what it got.
  const double wait = std::clamp(run.data_wait_share, 0.0, 0.95);
  w.model_rate = rate / (1 - wait);
  w.local_input_rate = rate;
  w.per_instance_rate = worker.vcpus / run.cpu_seconds_per_sample;
  const double missing = w.model_rate - w.local_input_rate;
  w.break_even =
      missing <= 1e-9 ? 0 : static_cast<int>(std::ceil(missing / w.per_instance_rate - 1e-9));
  const double trainer_spot = trainer.instance.spot_price_per_hour > 0
                                  ? trainer.instance.spot_price_per_hour
                                  : trainer.instance.price_per_hour;
  const double worker_spot =
      worker.spot_price_per_hour > 0 ? worker.spot_price_per_hour : worker.price_per_hour;
  // A CPU trainer with measured CPU costs: its cores train, build and receive (see the header).
  const double scale = rate / run.samples_per_second;  // the trainer instance vs the measured host
  const double budget = run.cpu_budget * scale;
  const double t = run.train_cpu_seconds_per_sample, p = run.cpu_seconds_per_sample;
  const double q = run.receive_cpu_seconds_per_sample;
  w.shared_cores = trainer.instance.gpus == 0 && budget > 0 && t + p > 0;
  auto throughput = [&](int k) {
    if (!w.shared_cores) {
      return std::min(w.model_rate, w.local_input_rate + k * w.per_instance_rate);
    }
    const double remote = std::min({k * w.per_instance_rate, w.model_rate, budget / (t + q)});
    const double local =
        std::clamp((budget - remote * (t + q)) / (t + p), 0.0, w.model_rate - remote);
    return remote + local;
  };
  if (w.shared_cores) {
    // Past the point where the remote supply alone feeds the model or fills the cores.
    const double needed = std::min(w.model_rate, budget / (t + q));
    w.break_even = static_cast<int>(std::ceil(needed / w.per_instance_rate - 1e-9));
    while (w.break_even > 0 && throughput(w.break_even - 1) >= throughput(w.break_even) - 1e-9) {
      --w.break_even;
    }
  }
  for (int k = 0; k <= w.break_even + 1; ++k) {
    WhatIfRow row;
    row.cpu_instances = k;
    row.samples_per_second = throughput(k);
    row.price_per_hour = trainer.instance.price_per_hour + k * worker.price_per_hour;
    row.spot_price_per_hour = trainer_spot + k * worker_spot;
    w.rows.push_back(row);
    if (row.samples_per_dollar() > w.rows[w.best_value].samples_per_dollar()) w.best_value = k;
  }
  return w;
}

}  // namespace loom::profile
