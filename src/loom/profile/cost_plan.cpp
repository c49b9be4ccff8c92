#include "loom/profile/cost_plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::profile {
namespace {

// The trainer host's CPU costs per sample, from a summary that has them (runs since the remote
// data workers' first landing): cores kept busy, and what training, building and receiving cost.
void measure_cpu(const nlohmann::json& s, RunMeasurement& m) {
  const double cpu = s.value("cpu_seconds", 0.0), wall = s.value("wall_seconds", 0.0);
  const double samples = s.value("samples", 0.0);
  if (cpu <= 0 || wall <= 0 || samples <= 0) return;
  m.cpu_budget = std::min<double>(m.usable_cores, cpu / wall);
  double remote_samples = 0, receive_cpu = 0;
  const auto& remote = s.at("data").value("remote", nlohmann::json());
  if (remote.is_object()) {
    for (const auto& w : remote.at("workers")) remote_samples += w.value("samples", 0.0);
    receive_cpu = remote.value("receive_cpu_seconds", 0.0);
  }
  const double remote_share = std::min(1.0, remote_samples / samples);
  if (remote_samples > 0 && receive_cpu > 0) {
    m.receive_cpu_seconds_per_sample = receive_cpu / remote_samples;
    m.receive_basis = "measured";
  } else {
    const double bytes = s.at("data").value("sample_bytes", 0.0);
    m.receive_cpu_seconds_per_sample = bytes * kReceiveSecondsPerByte;
    char basis[96];
    std::snprintf(basis, sizeof basis, "estimated: %.0f bytes at %.1f ns/byte", bytes,
                  1e9 * kReceiveSecondsPerByte);
    m.receive_basis = basis;
  }
  // Per sample the cores spent budget / rate: the rest of building and receiving is training.
  m.train_cpu_seconds_per_sample = std::max(
      0.0, m.cpu_budget / m.samples_per_second - m.cpu_seconds_per_sample * (1 - remote_share) -
               m.receive_cpu_seconds_per_sample * remote_share);
}

const InstanceEstimate& find(const std::vector<InstanceEstimate>& all, const std::string& name,
                             const char* role) {
  for (const auto& e : all) {
    if (e.instance.name == name) return e;
  }
  throw ConfigError("no instance '" + name + "' in the price list (asked for as the " + role + ")");
}

void pick_defaults(const std::vector<InstanceEstimate>& all, CostPlan& plan) {
  if (plan.trainer.empty()) {
    for (const auto& e : all) {
      if (e.samples_per_second && e.instance.gpus > 0) {
        plan.trainer = e.instance.name;
        break;
      }
    }
    for (const auto& e : all) {
      if (plan.trainer.empty() && e.samples_per_second) plan.trainer = e.instance.name;
    }
  }
  if (plan.worker.empty()) {
    double best = 0;
    for (const auto& e : all) {
      const double per_dollar = e.instance.vcpus / e.instance.price_per_hour;
      if (e.instance.gpus == 0 && per_dollar > best)
        best = per_dollar, plan.worker = e.instance.name;
    }
  }
}

}  // namespace

RunMeasurement measurement_from_summary(const std::string& summary_json,
                                        const std::string& origin) {
  try {
    const nlohmann::json s = nlohmann::json::parse(summary_json);
    RunMeasurement m;
    m.samples_per_second = s.at("samples_per_second").get<double>();
    m.usable_cores = s.at("machine").at("usable_cores").get<int>();
    m.data_wait_share = s.at("step_time").at("share").value("data_wait", 0.0);
    m.cpu_seconds_per_sample = s.at("data").value("cpu_seconds_per_sample", 0.0);
    if (m.samples_per_second <= 0) throw ConfigError(origin + ": the run measured no throughput");
    measure_cpu(s, m);
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(origin + ": not a Loom run summary (" + std::string(e.what()) + ")");
  }
}

CostPlan plan_costs(const RunMeasurement& run, const std::vector<InstanceType>& prices,
                    std::string trainer, std::string worker) {
  CostPlan plan;
  plan.run = run;
  plan.instances = estimate_instances(run, prices);
  plan.trainer = std::move(trainer);
  plan.worker = std::move(worker);
  pick_defaults(plan.instances, plan);
  if (plan.trainer.empty() || plan.worker.empty()) return plan;
  const InstanceEstimate& t = find(plan.instances, plan.trainer, "trainer");
  const InstanceEstimate& w = find(plan.instances, plan.worker, "worker");
  plan.what_if = heterogeneous_what_if(run, t, w.instance);
  return plan;
}

}  // namespace loom::profile
