#include "loom/parallel/ps/ps_bucket_exchange.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "loom/comm/work_group.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/parallel/ps/server_window.h"

namespace loom::parallel::ps {

PsBucketExchange::PsBucketExchange(comm::Communicator& world, PsExchangeOptions options)
    : world_(world),
      options_(std::move(options)),
      servers_(std::make_unique<ServerWindow>(options_.server_hosts)) {
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
  servers_->set_largest_part_bytes(plan_.largest_part_bytes());
  ++plan_version_;
  plan_changed_ = true;
  buckets_ = buckets;
  first_part_.assign(buckets.size() + 1, plan_.parts.size());
  for (size_t i = plan_.parts.size(); i-- > 0;) {
    first_part_[static_cast<size_t>(plan_.parts[i].buffer)] = i;
  }
  for (size_t b = buckets.size(); b-- > 0;) {  // empty buckets have no parts
    first_part_[b] = std::min(first_part_[b], first_part_[b + 1]);
  }
  filled_.assign(plan_.parts.size(), 0);
  part_works_.assign(plan_.parts.size(), {});
  next_part_ = 0;
}

bool PsBucketExchange::filled(std::size_t index, std::int64_t offset, std::int64_t elements) {
  const std::int64_t end = offset + elements;
  for (size_t i = first_part_.at(index); i < first_part_[index + 1]; ++i) {
    const Part& p = plan_.parts[i];
    const std::int64_t overlap = std::min(end, p.offset + p.elements) - std::max(offset, p.offset);
    if (overlap > 0) filled_[i] += overlap;
  }
  return push_parts(next_part_);
}

bool PsBucketExchange::push_parts(std::size_t complete_before) {
  bool pushed = false;
  while (
      next_part_ < plan_.parts.size() &&
      (next_part_ < complete_before || filled_[next_part_] >= plan_.parts[next_part_].elements)) {
    if (!in_step_) begin_step();
    const Part& p = plan_.parts[next_part_];
    part_works_[next_part_] = start_part(world_, plan_, next_part_,
                                         buckets_[static_cast<size_t>(p.buffer)], options_.roles);
    ++next_part_;
    pushed = true;
  }
  return pushed;
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
  if (index >= buckets_.size() || !bucket.is_same(buckets_[index])) {
    throw Error("ps: bucket " + std::to_string(index) +
                " is not a tensor the exchange was given by buckets_changed()");
  }
  // Buckets start in order, each once complete: every part up to this bucket's last can go.
  if (!in_step_) begin_step();
  push_parts(first_part_[index + 1]);
  std::vector<std::vector<comm::WorkPtr>> per_server(static_cast<size_t>(options_.roles.servers));
  for (size_t i = first_part_[index]; i < first_part_[index + 1]; ++i) {
    auto& works = per_server[static_cast<size_t>(plan_.parts[i].server)];
    for (comm::WorkPtr& work : part_works_[i]) works.push_back(std::move(work));
  }
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

void PsBucketExchange::step_finished(SyncStats&) {
  wait_for_control_sends();
  // Each server sends worker 0 its totals after the step's last sum; the receive is posted only
  // now, since receives from a peer pair with its sends in order.
  if (world_.rank() == 0) {
    std::vector<ServerLoad> totals;
    for (int s = 0; s < options_.roles.servers; ++s) {
      at::Tensor load = at::zeros({kLoadWords}, at::kDouble);
      comm::wait_named(world_.recv(load, options_.roles.server_rank(s)),
                       "ps totals of " + server_name(s), world_.options().timeout);
      totals.push_back(decode_load(load));
    }
    servers_->heard(std::move(totals));
  }
  ++step_;
  in_step_ = false;
  std::fill(filled_.begin(), filled_.end(), 0);
  next_part_ = 0;
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

LayoutMetrics* PsBucketExchange::metrics() { return servers_.get(); }

std::string PsBucketExchange::describe() const {
  return "parameter servers over " + world_.backend() + ": " + plan_.describe();
}

}  // namespace loom::parallel::ps
