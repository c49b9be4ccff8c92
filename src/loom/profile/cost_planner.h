// What a training run would cost elsewhere, from one profiled run (its summary.json) and a
// price list. Two questions:
//   1. Per instance type: samples/s, samples per dollar (3600 x samples/s / price per hour),
//      and the time and cost to train N samples, on demand and on spot.
//   2. The heterogeneous what-if: a training instance plus k CPU instances that only
//      preprocess. The model consumes samples at the rate the run reached without waiting for
//      data; the input pipeline costs the CPU seconds per sample the run measured, so a CPU
//      instance with v vCPUs supplies v / cost samples/s. Adding instances pays until the
//      input keeps up with the model: the break-even k.
//      On a CPU trainer whose run measured its CPU time, the trainer's cores are shared: each
//      sample costs them t to train on, p to build locally or q to receive from a worker (q
//      measured in a run with workers, else estimated from the sample's bytes). With k
//      instances supplying r samples/s, the local threads build what the cores have left,
//      L = (B - r (t + q)) / (t + p), where B is the cores the run kept busy.
//
// Throughput on another instance type is estimated from the measured one: a price entry's own
// `samples_per_second` (measured there) wins; otherwise CPU instances scale with vCPUs over the
// run's usable cores, and accelerator instances, which a CPU run cannot predict, are reported
// as not estimated.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace loom::profile {

struct InstanceType {
  std::string name;
  int vcpus = 0;
  int gpus = 0;
  double price_per_hour = 0;
  double spot_price_per_hour = 0;  // 0: no spot price known
  double samples_per_second = 0;   // measured on this type; 0: estimate it
};

// Parses a price list (YAML: `instances: [{name, vcpus, gpus, price_per_hour,
// spot_price_per_hour, samples_per_second}, ...]`). Throws ConfigError naming the entry and key.
std::vector<InstanceType> parse_prices(const std::string& yaml_text, const std::string& origin);

// What the planner takes from a run.
struct RunMeasurement {
  double samples_per_second = 0;
  int usable_cores = 0;
  double data_wait_share = 0;         // of the step time, 0..1
  double cpu_seconds_per_sample = 0;  // of the input pipeline
  // The trainer host's CPU, when the run measured it (0: unknown, the simpler model is used):
  double cpu_budget = 0;                      // cores the process kept busy on average
  double train_cpu_seconds_per_sample = 0;    // t: all but building and receiving
  double receive_cpu_seconds_per_sample = 0;  // q
  std::string receive_basis;                  // "measured" or how it was estimated
};

// What receiving a remote sample costs the trainer per byte when no run measured it: the kernel's
// copy out of the socket, one copy into the batch and its CRC (measured 0.9-1.0 ns/byte on the
// 2-core test machine, bench/RESULTS.md).
constexpr double kReceiveSecondsPerByte = 1.0e-9;

struct InstanceEstimate {
  InstanceType instance;
  std::optional<double> samples_per_second;  // nullopt: cannot be estimated from this run
  std::string basis;                         // "measured", "scaled by vCPUs", or why not
  double samples_per_dollar() const;
  double hours_for(double samples) const;
  double cost_for(double samples) const;       // on demand
  double spot_cost_for(double samples) const;  // 0 without a spot price
};

std::vector<InstanceEstimate> estimate_instances(const RunMeasurement& run,
                                                 const std::vector<InstanceType>& instances);

struct WhatIfRow {
  int cpu_instances = 0;
  double samples_per_second = 0;  // min(model rate, input rate)
  double price_per_hour = 0;
  double spot_price_per_hour = 0;  // CPU instances at spot (the trainer too, if it has one)
  double samples_per_dollar() const;
  double spot_samples_per_dollar() const;
};

struct WhatIf {
  double model_rate = 0;         // samples/s the model consumes when never waiting for data
  double local_input_rate = 0;   // samples/s the trainer's own loader supplied
  bool shared_cores = false;     // the CPU-sharing model (see above) was used
  double per_instance_rate = 0;  // samples/s one CPU instance supplies
  int break_even = 0;            // CPU instances after which more do not speed training up
  std::vector<WhatIfRow> rows;   // k = 0 .. break_even + 1
  int best_value = 0;            // the k with the most samples per dollar (on demand)
};

// `trainer` must have an estimated rate; `worker` is the preprocessing instance type.
WhatIf heterogeneous_what_if(const RunMeasurement& run, const InstanceEstimate& trainer,
                             const InstanceType& worker);

}  // namespace loom::profile
