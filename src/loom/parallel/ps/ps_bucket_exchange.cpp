#include "loom/parallel/ps/ps_bucket_exchange.h"

#include <ATen/ATen.h>

#include "loom/comm/work_group.h"
#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::parallel::ps {

PsBucketExchange::PsBucketExchange(comm::Communicator& world, PsExchangeOptions options)
    : world_(world), options_(std::move(options)) {
  const PsRoles& roles = options_.roles;
  if (roles.workers < 1 || roles.servers < 1 || roles.workers + roles.servers != world.world()) {
    throw ConfigError("parallel.ps.servers: " + std::to_string(roles.servers) + " servers and " +
                      std::to_string(roles.workers) + " workers do not make the job's " +
                      std::to_string(world.world()) + " ranks");
  }
  if (world.rank() >= roles.workers) {
    throw Error("ps: rank " + std::to_string(world.rank()) + " is a server, not a worker");
  }
}

PsBucketExchange::~PsBucketExchange() {
  // After a failed step the servers learn of it from their timeout.
  if (in_step_ || stopped_) return;
  try {
    send_to_servers(Command::kStop);
    wait_for_control_sends();
  } catch (const std::exception& e) {
    LOOM_LOG(kWarn, "ps") << "could not tell the servers to stop: " << e.what();
  }
}

std::string PsBucketExchange::server_name(int server) const {
  return ps::server_name(options_.roles, server, options_.server_hosts);
}

void PsBucketExchange::buckets_changed(const std::vector<at::Tensor>& buckets) {
  std::vector<std::int64_t> sizes;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].scalar_type() != buckets[0].scalar_type()) {
      throw Error("ps: gradient bucket " + std::to_string(b) + " holds " +
                  c10::toString(buckets[b].scalar_type()) + ", bucket 0 " +
                  c10::toString(buckets[0].scalar_type()) +
                  "; parameter servers sum one element type per run");
    }
    sizes.push_back(buckets[b].numel());
  }
  if (!buckets.empty()) dtype_ = buckets[0].scalar_type();
  plan_ = plan_parts(sizes, static_cast<std::int64_t>(c10::elementSize(dtype_)),
                     options_.part_bytes, options_.roles.servers);
  ++plan_version_;
  plan_changed_ = true;
}

void PsBucketExchange::send_to_servers(Command command) {
  control_.clear();
  for (int s = 0; s < options_.roles.servers; ++s) {
    const std::vector<std::int64_t> share = server_share(plan_, s);
    const StepHeader header = make_header(options_.job, step_, command, options_.roles.workers,
                                          options_.roles.servers, plan_version_, share, dtype_);
    std::vector<at::Tensor> messages;
    messages.push_back(encode_header(header));
    if (command == Command::kPlan && !share.empty())
      messages.push_back(at::tensor(share, at::kLong));
    for (at::Tensor& message : messages) {
      comm::WorkPtr work = world_.send(message, options_.roles.server_rank(s));
      control_.push_back({s, std::move(message), std::move(work)});
    }
  }
}

void PsBucketExchange::wait_for_control_sends() {
  for (const ControlSend& send : control_) {
    comm::wait_named(
        send.work, "ps step " + std::to_string(step_) + "'s header to " + server_name(send.server),
        world_.options().timeout);
  }
  control_.clear();
}

void PsBucketExchange::begin_step() {
  send_to_servers(plan_changed_ ? Command::kPlan : Command::kStep);
  plan_changed_ = false;
  in_step_ = true;
}

comm::WorkPtr PsBucketExchange::start(std::size_t index, const at::Tensor& bucket) {
  if (index == 0) begin_step();
  auto per_server = start_push_pull(world_, plan_, static_cast<int>(index), bucket, options_.roles);
  std::vector<comm::WorkPtr> groups;
  for (int s = 0; s < options_.roles.servers; ++s) {
    auto& works = per_server[static_cast<size_t>(s)];
    if (works.empty()) continue;
    groups.push_back(
        std::make_shared<comm::WorkGroup>("push/pull with " + server_name(s), std::move(works)));
  }
  return std::make_shared<comm::WorkGroup>("ps exchange of gradient bucket " +
                                               std::to_string(index) + " (worker rank " +
                                               std::to_string(world_.rank()) + ")",
                                           std::move(groups));
}

void PsBucketExchange::step_finished(SyncStats& stats) {
  wait_for_control_sends();
  // Each server sends worker 0 its totals after the step's last sum; the receive is posted only
  // now, since receives from a peer pair with its sends in order.
  stats.servers.clear();
  stats.largest_part_bytes = plan_.largest_part_bytes();
  for (int s = 0; world_.rank() == 0 && s < options_.roles.servers; ++s) {
    at::Tensor load = at::zeros({kLoadWords}, at::kDouble);
    comm::wait_named(world_.recv(load, options_.roles.server_rank(s)),
                     "ps totals of " + server_name(s), world_.options().timeout);
    stats.servers.push_back(decode_load(load));
  }
  ++step_;
  in_step_ = false;
}

void PsBucketExchange::end_training() {
  if (stopped_ || in_step_) return;
  send_to_servers(Command::kStop);
  wait_for_control_sends();
  stopped_ = true;
  for (int s = 0; world_.rank() == 0 && s < options_.roles.servers; ++s) {
    at::Tensor load = at::zeros({kLoadWords}, at::kDouble);
    comm::wait_named(world_.recv(load, options_.roles.server_rank(s)),
                     "ps: the last totals of " + server_name(s), world_.options().timeout);
  }
}

std::string PsBucketExchange::describe() const {
  return "parameter servers over " + world_.backend() + ": " + plan_.describe();
}

}  // namespace loom::parallel::ps
