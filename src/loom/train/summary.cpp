#include "loom/train/summary.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "loom/core/durable_file.h"
#include "loom/core/torch_build.h"
#include "loom/train/autotune_session.h"

namespace loom::train {

namespace {

// The training ranks' mesh, outermost dimension first: {"data": 2, "pipeline": 2}.
nlohmann::ordered_json mesh_json(const parallel::Mesh& mesh) {
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (const parallel::MeshDim& d : mesh.dims()) dims[d.name] = d.size;
  return dims;
}

// Mean seconds per step and each phase's share of it, over the steady-state steps.
nlohmann::ordered_json step_times_json(const profile::StepTimes& times, int64_t steps) {
  nlohmann::ordered_json shares = nlohmann::ordered_json::object();
  for (size_t i = 0; i < profile::kPhaseCount; ++i) {
    shares[profile::phase_name(static_cast<profile::Phase>(i))] =
        times.share(static_cast<profile::Phase>(i));
  }
  return {{"steps", steps},
          {"seconds_per_step", steps > 0 ? times.wall / static_cast<double>(steps) : 0.0},
          {"share", shares}};
}

// The steady steps on the host's clock, and on the device's where the steps ran on one.
nlohmann::ordered_json step_time_json(const TrainSummary& s) {
  nlohmann::ordered_json out = step_times_json(s.step_times, s.steady_steps);
  out["device"] = s.device_step_times ? step_times_json(*s.device_step_times, s.device_steady_steps)
                                      : nlohmann::ordered_json(nullptr);
  return out;
}

// A GPU's host synchronisations a step, by phase, over the steps counted; null where none were.
nlohmann::ordered_json host_syncs_json(const profile::HostSyncs& syncs) {
  if (syncs.steps == 0) return nullptr;
  nlohmann::ordered_json by_phase = nlohmann::ordered_json::object();
  for (size_t i = 0; i < profile::kPhaseCount; ++i) {
    const auto phase = static_cast<profile::Phase>(i);
    by_phase[profile::phase_name(phase)] = syncs.per_step(phase);
  }
  return {{"steps", syncs.steps}, {"per_step", syncs.per_step()}, {"by_phase", by_phase}};
}

nlohmann::ordered_json peak_megabytes(const TrainSummary& s) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (double bytes : s.layout.peak_bytes) out.push_back(bytes / (1 << 20));
  return out;
}

nlohmann::ordered_json findings_json(const std::vector<profile::Finding>& findings) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& f : findings) {
    out.push_back({{"id", f.id},
                   {"severity", f.severity},
                   {"evidence", f.evidence},
                   {"advice", f.advice},
                   {"key", f.key},
                   {"suggested", f.suggested.empty() ? nlohmann::ordered_json(nullptr)
                                                     : nlohmann::ordered_json(f.suggested)},
                   {"max_gain", f.max_gain > 0 ? nlohmann::ordered_json(f.max_gain) : nullptr},
                   {"step", f.step >= 0 ? nlohmann::ordered_json(f.step) : nullptr},
                   {"measured", f.measured}});
  }
  return out;
}

// The autotuner's result (marked when it came from the checkpoint resumed from), why it did not
// run, or null when it was not asked for.
nlohmann::ordered_json autotune_summary(const TrainSummary& s) {
  if (s.autotune) {
    nlohmann::ordered_json j = autotune_json(*s.autotune);
    j["resumed"] = s.autotune_resumed;
    return j;
  }
  if (s.autotune_skipped.empty()) return nullptr;
  return {{"skipped", s.autotune_skipped}};
}

// (max - min) / mean; 0 where the mean is not positive.
double spread_of_mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  double mean = 0;
  for (double v : values) mean += v / static_cast<double>(values.size());
  return mean > 0 ? (*high - *low) / mean : 0.0;
}

// The tensor groups: their size, whether they split the sequence, the model's plan as applied
// (pattern and style) and the parameters it cut. Null without tensor groups.
nlohmann::ordered_json tensor_parallel_json(const TrainSummary& s) {
  if (!s.plan.tensor) return nullptr;
  nlohmann::ordered_json plan = nlohmann::ordered_json::array();
  for (const auto& [pattern, style] : s.layout.tensor_plan) {
    plan.push_back({{"pattern", pattern}, {"style", style}});
  }
  return {{"ranks", s.plan.tensor->ranks},
          {"sequence", s.plan.tensor->sequence},
          {"plan", plan},
          {"cut_parameters", s.layout.tensor_cut_parameters}};
}

// Each server's load, and how evenly it was spread: the difference in bytes between the busiest
// and the idlest server per worker and step, in parts (the plan promises at most one), and the
// spread of their busy (CPU) and active time relative to the mean. Null without servers.
nlohmann::ordered_json parameter_servers_json(const TrainSummary& s) {
  const std::vector<parallel::ServerLoad>& servers = s.layout.servers;
  if (servers.empty()) return nullptr;
  const int workers = s.plan.trainers;
  nlohmann::ordered_json per_server = nlohmann::ordered_json::array();
  std::int64_t most = 0, least = INT64_MAX, steps = 0, stalest = 0;
  std::vector<double> busy, active;
  for (size_t i = 0; i < servers.size(); ++i) {
    const parallel::ServerLoad& load = servers[i];
    const std::vector<std::string>& hosts = s.layout.server_hosts;
    per_server.push_back({{"server", i},
                          {"host", i < hosts.size() ? hosts[i] : std::string()},
                          {"steps", load.steps},
                          {"bytes_in", load.bytes_in},
                          {"bytes_out", load.bytes_out},
                          {"sum_seconds", load.sum_seconds},
                          {"active_seconds", load.active_seconds},
                          {"busy_seconds", load.busy_seconds},
                          {"max_staleness", load.max_staleness}});
    most = std::max(most, load.bytes_in);
    least = std::min(least, load.bytes_in);
    steps = std::max(steps, load.steps);
    stalest = std::max(stalest, load.max_staleness);
    busy.push_back(load.busy_seconds);
    active.push_back(load.active_seconds);
  }
  const double part_bytes_moved = static_cast<double>(s.layout.largest_part_bytes) *
                                  std::max(1, workers) * std::max<std::int64_t>(1, steps);
  return {{"servers", servers.size()},
          {"workers", workers},
          {"largest_part_bytes", s.layout.largest_part_bytes},
          {"bytes_spread_parts",
           part_bytes_moved > 0 ? static_cast<double>(most - least) / part_bytes_moved : 0.0},
          {"busy_spread", spread_of_mean(busy)},
          {"active_spread", spread_of_mean(active)},
          // Async and SSP: the most steps of the slowest worker that any worker's parameters
          // lacked (SSP keeps it <= parallel.ps.staleness; sync 0).
          {"max_staleness", stalest},
          {"per_server", per_server}};
}

// -1 (unknown) as null.
nlohmann::ordered_json known(int64_t value) {
  return value < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(value);
}

nlohmann::ordered_json restarts_json(const std::vector<RestartRecord>& restarts) {
  auto list = nlohmann::ordered_json::array();
  for (const auto& r : restarts) {
    list.push_back({{"cause", r.cause},
                    {"failed_at_step", known(r.failed_at_step)},
                    {"resumed_from_step", known(r.resumed_from_step)},
                    {"lost_steps", known(r.lost_steps())}});
  }
  return list;
}

nlohmann::ordered_json checkpoints_json(const CheckpointTimes& t) {
  return {{"async", t.async},
          {"committed", t.committed},
          {"blocked_seconds", t.blocked_seconds},
          {"max_blocked_seconds", t.max_blocked_seconds},
          {"background_seconds", t.background_seconds},
          {"max_background_seconds", t.max_background_seconds}};
}

// checkpoint.keep_best's checkpoint, or null.
nlohmann::ordered_json best_checkpoint_json(const std::optional<BestCheckpoint>& best) {
  if (!best) return nullptr;
  return {
      {"path", best->path}, {"step", best->step}, {"metric", best->metric}, {"value", best->value}};
}

nlohmann::ordered_json remote_json(const TrainSummary& s) {
  if (s.remote_workers.empty()) return nullptr;
  nlohmann::ordered_json workers = nlohmann::ordered_json::array();
  for (const auto& w : s.remote_workers) {
    workers.push_back({{"address", w.address},
                       {"state", w.state},
                       {"threads", w.threads},
                       {"batches", w.batches},
                       {"samples", w.samples},
                       {"bytes", w.bytes},
                       {"mean_latency_s", w.batches > 0 ? w.request_seconds / w.batches : 0.0},
                       {"up_seconds", w.up_seconds},
                       {"failures", w.failures},
                       {"crc_mismatches", w.crc_mismatches},
                       {"duplicates", w.duplicates},
                       {"last_error", w.last_error}});
  }
  return {{"workers", workers},
          {"local_batches", s.remote_local_batches},
          {"receive_cpu_seconds", s.remote_receive_cpu_seconds}};
}

}  // namespace

void write_summary(const std::string& path, const TrainSummary& s, const Topology& topology) {
  nlohmann::ordered_json j = {
      {"model", s.model},
      {"parameters", s.parameters},
      {"test_accuracy", s.test_accuracy},
      {"test_loss", s.test_loss},
      {"final_train_loss", s.final_train_loss},
      {"epochs", s.epochs},
      {"steps", s.steps},
      {"samples", s.samples},
      {"samples_per_second", s.samples_per_second},
      {"task", s.tokens_per_sample > 0 ? "language_model" : "image_classification"},
      {"tokens_per_sample", s.tokens_per_sample},
      {"tokens_per_second", s.tokens_per_second()},
      {"test_perplexity", s.test_perplexity},
      {"wall_seconds", s.wall_seconds},
      {"cpu_seconds", s.cpu_seconds},
      {"device", s.runtime.device},
      {"precision", s.runtime.precision},
      {"memory_format", s.runtime.memory_format},
      {"threads", s.runtime.threads},
      {"deterministic", s.runtime.deterministic},
      {"loss_scale", !s.loss_scale
                         ? nlohmann::ordered_json(nullptr)
                         : nlohmann::ordered_json{{"scale", s.loss_scale->scale},
                                                  {"growth_tracker", s.loss_scale->growth_tracker},
                                                  {"skipped_steps", s.loss_scale->skipped_steps}}},
      {"choices",
       {{"device", s.runtime.device_reason},
        {"precision", s.runtime.precision_reason},
        {"memory_format", s.runtime.memory_format_reason},
        {"threads", s.runtime.threads_reason}}},
      {"memory",
       {{"allocator", s.allocator},
        {"peak_cached_bytes_in_use", s.peak_cached_bytes_in_use},
        {"device_peak_allocated_bytes", s.device_peak_allocated_bytes},
        {"device_peak_reserved_bytes", s.device_peak_reserved_bytes},
        {"allocator_hit_rate", s.allocator_hit_rate},
        {"optimizer_state_bytes", s.optimizer_state_bytes},
        {"gradient_bytes", s.gradient_bytes},
        {"parameter_bytes", s.parameter_bytes}}},
      {"step_time", step_time_json(s)},
      {"host_syncs", host_syncs_json(s.host_syncs)},
      {"findings", findings_json(s.findings)},
      {"notices", findings_json(s.notices)},
      {"mfu",
       {{"forward_flops_per_sample", s.forward_flops_per_sample},
        {"training_flops_per_sample", 3 * s.forward_flops_per_sample},
        {"basis", s.flops_basis},
        {"achieved_flops_per_second", s.achieved_flops_per_second()},
        {"peak_flops_per_second", s.peak_flops_per_second},
        {"peak_dtype", s.peak_dtype},
        {"mfu", s.mfu()}}},
      {"blas",
       {{"library", s.blas.name},
        {"path", s.blas.path},
        {"fp32_matmul_flops_per_second", s.fp32_matmul_flops_per_second}}},
      {"data",
       {{"samples_read", s.data.samples},
        {"bad_samples",
         {{"unreadable", s.data.bad[0]},
          {"truncated", s.data.bad[1]},
          {"undecodable", s.data.bad[2]},
          {"too_large", s.data.bad[3]}}},
        {"substituted", s.data.substituted},
        {"loader_threads", s.loader_threads},
        {"sample_bytes", s.sample_bytes},
        {"loader_cpu_seconds", s.data.cpu_seconds},
        {"cpu_seconds_per_sample", local_cpu_seconds_per_sample(s.data, s.remote_workers)},
        {"loader_busy", s.loader_threads > 0 && s.wall_seconds > 0
                            ? s.data.build_seconds / (s.loader_threads * s.wall_seconds)
                            : 0.0},
        {"remote", remote_json(s)}}},
      {"layout",
       {{"text", s.plan.describe()},
        {"ranks", s.plan.world},
        {"mesh", mesh_json(s.plan.mesh)},
        {"servers", s.plan.servers ? s.plan.servers->servers : 0},
        {"global_batch", s.plan.step.global_batch},
        {"replica_batch", s.plan.step.replica_batch},
        {"micro_batch", s.plan.step.micro_batch},
        {"micro_batches", s.plan.step.micro_batches},
        {"lr_scale", s.plan.data.lr_scale},
        {"zero", s.plan.data.zero_stage}}},
      {"data_parallel",
       {{"ranks", s.plan.data.replicas},
        {"backend", s.layout.backend},
        {"buckets", s.buckets},
        {"bytes_per_step", s.comm_bytes_per_step},
        {"comm_seconds_per_step", s.comm_seconds_per_step},
        {"overlap", s.comm_overlap},
        {"exchange", s.layout.exchange},
        {"worker_compute_seconds", s.layout.worker_compute_seconds}}},
      {"parameter_servers", parameter_servers_json(s)},
      {"tensor_parallel", tensor_parallel_json(s)},
      {"pipeline", !s.plan.pipeline
                       ? nlohmann::ordered_json(nullptr)
                       : nlohmann::ordered_json{{"ranks", s.plan.pipeline->ranks},
                                                {"backend", s.layout.backend},
                                                {"schedule", s.layout.schedule},
                                                {"microbatches", s.plan.step.micro_batches},
                                                {"split", s.layout.split},
                                                {"peak_memory_mb", peak_megabytes(s)}}},
      {"autotune", autotune_summary(s)},
      {"machine",
       {{"cpu", topology.cpu_model},
        {"usable_cores", topology.usable_cores},
        // The machine's cores as this process may use them (affinity and quota), apart from
        // the share of them each rank sized its threads to (usable_cores, kept for readers).
        {"cores", usable_cores(topology.affinity_cores, topology.quota_cores)},
        {"online_cores", topology.online_cores},
        {"rank_cores", topology.usable_cores},
        {"avx2", topology.cpu.avx2},
        {"avx512f", topology.cpu.avx512f},
        {"avx512_bf16", topology.cpu.avx512_bf16},
        {"amx_bf16", topology.cpu.amx_bf16},
        {"cpu_capability", to_string(topology.kernels)},
        {"libtorch", torch_build().version},
        {"libtorch_cuda", torch_build().cuda}}},
      {"resumed_from_step", known(s.resumed_from_step)},
      {"last_checkpoint", s.last_checkpoint},
      {"best_checkpoint", best_checkpoint_json(s.best_checkpoint)},
      {"preempted", s.preempted},
      {"checkpoint_failures", s.checkpoint_failures},
      {"checkpoints", checkpoints_json(s.checkpoint_times)},
      {"restarts", restarts_json(s.restarts)}};
  replace_file_atomically(path, j.dump(2) + "\n");
}

double local_cpu_seconds_per_sample(const data::LoaderStats& data,
                                    const std::vector<data::RemoteWorkerStats>& workers) {
  int64_t local = data.samples;
  for (const auto& w : workers) local -= w.samples;
  return local > 0 ? data.cpu_seconds / static_cast<double>(local) : 0.0;
}

}  // namespace loom::train
