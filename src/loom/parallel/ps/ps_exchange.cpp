#include "loom/parallel/ps/ps_exchange.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "loom/comm/reduce_kernels.h"
#include "loom/comm/work_group.h"
#include "loom/core/error.h"

namespace loom::parallel::ps {
namespace {

using Clock = std::chrono::steady_clock;

std::string part_name(const PartPlan& plan, size_t index) {
  const Part& p = plan.parts[index];
  return "part " + std::to_string(index) + " (buffer " + std::to_string(p.buffer) + ", " +
         std::to_string(p.elements) + " elements) of server " + std::to_string(p.server);
}

}  // namespace

std::string server_name(const PsRoles& roles, int server, const std::vector<std::string>& hosts) {
  std::string name =
      "server " + std::to_string(server) + " (rank " + std::to_string(roles.server_rank(server));
  if (static_cast<size_t>(server) < hosts.size()) {
    name += " on host " + hosts[static_cast<size_t>(server)];
  }
  return name + ")";
}

int server_index(const comm::Communicator& world, const PsRoles& roles) {
  const int server = world.rank() - roles.workers;
  if (server < 0 || server >= roles.servers || roles.workers + roles.servers != world.world()) {
    throw ConfigError("parallel.ps.servers: rank " + std::to_string(world.rank()) + " of " +
                      std::to_string(world.world()) + " is not among the " +
                      std::to_string(roles.servers) + " server ranks after " +
                      std::to_string(roles.workers) + " workers");
  }
  return server;
}

std::vector<comm::WorkPtr> start_part(comm::Communicator& comm, const PartPlan& plan, size_t part,
                                      const at::Tensor& flat, const PsRoles& roles) {
  const Part& p = plan.parts.at(part);
  if (p.offset + p.elements > flat.numel()) {
    throw Error("ps push: buffer " + std::to_string(p.buffer) + " has " +
                std::to_string(flat.numel()) + " elements, but the plan's " +
                part_name(plan, part) + " ends at " + std::to_string(p.offset + p.elements));
  }
  const at::Tensor slice = flat.narrow(0, p.offset, p.elements);
  const int server = roles.server_rank(p.server);
  return {comm.send(slice, server), comm.recv(slice, server)};
}

void push_pull(comm::Communicator& comm, const PartPlan& plan,
               const std::vector<at::Tensor>& buffers, const PsRoles& roles,
               std::chrono::milliseconds timeout) {
  int last_buffer = -1;
  for (const Part& p : plan.parts) last_buffer = std::max(last_buffer, p.buffer);
  if (static_cast<size_t>(last_buffer + 1) > buffers.size()) {
    throw Error("ps push: the plan has " + std::to_string(last_buffer + 1) + " buffers, " +
                std::to_string(buffers.size()) + " given");
  }
  std::vector<std::vector<comm::WorkPtr>> started;  // per part: its push and pull
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    const at::Tensor& flat = buffers[static_cast<size_t>(plan.parts[i].buffer)];
    started.push_back(start_part(comm, plan, i, flat, roles));
  }
  const std::string who = " (worker rank " + std::to_string(comm.rank()) + ")";
  for (size_t i = 0; i < started.size(); ++i) {
    for (const comm::WorkPtr& work : started[i]) {
      const Part& p = plan.parts[i];
      comm::wait_named(work,
                       "ps push/pull of part " + std::to_string(i) + " (buffer " +
                           std::to_string(p.buffer) + ") with server " + std::to_string(p.server) +
                           who,
                       timeout);
    }
  }
}

std::vector<std::int64_t> server_share(const PartPlan& plan, int server) {
  std::vector<std::int64_t> share;
  for (const Part& p : plan.parts) {
    if (p.server == server) share.push_back(p.elements);
  }
  return share;
}

ServeStats serve_step(comm::Communicator& comm, const PartPlan& plan, int server,
                      c10::ScalarType dtype, const PsRoles& roles, double scale,
                      std::chrono::milliseconds timeout) {
  return serve_parts(comm, server_share(plan, server), server, dtype, roles, scale, timeout);
}

ServeStats serve_parts(comm::Communicator& comm, const std::vector<std::int64_t>& share, int server,
                       c10::ScalarType dtype, const PsRoles& roles, double scale,
                       std::chrono::milliseconds timeout) {
  if (!comm::reducible(dtype)) {
    throw Error(std::string("ps server: cannot sum ") + c10::toString(dtype) + " parts");
  }
  struct Incoming {
    size_t index;
    at::Tensor rows;  // [workers, elements]: row w from worker w
    std::vector<comm::WorkPtr> receives;
  };
  // Every receive of the step is posted first: parts arrive in whatever order the workers'
  // backward passes send them, and none waits behind another.
  std::vector<Incoming> incoming;
  for (size_t i = 0; i < share.size(); ++i) {
    Incoming in{i, at::empty({roles.workers, share[i]}, dtype), {}};
    for (int w = 0; w < roles.workers; ++w) in.receives.push_back(comm.recv(in.rows[w], w));
    incoming.push_back(std::move(in));
  }
  ServeStats stats;
  std::vector<comm::WorkPtr> sends;
  std::vector<at::Tensor> sums;  // alive until sent
  const std::string who =
      " (server " + std::to_string(server) + ", rank " + std::to_string(comm.rank()) + ")";
  Clock::time_point first_arrival{};
  for (Incoming& in : incoming) {
    for (int w = 0; w < roles.workers; ++w) {
      comm::wait_named(in.receives[static_cast<size_t>(w)],
                       "ps server receiving part " + std::to_string(in.index) + " (" +
                           std::to_string(share[in.index]) + " elements) from worker rank " +
                           std::to_string(w) + who,
                       timeout);
    }
    const auto begin = Clock::now();
    if (first_arrival == Clock::time_point{}) first_arrival = begin;
    const std::int64_t elements = in.rows.size(1);
    at::Tensor sum = at::empty({elements}, dtype);
    std::vector<const void*> inputs;
    for (int w = 0; w < roles.workers; ++w) inputs.push_back(in.rows[w].data_ptr());
    comm::reduce_sum(dtype, sum.data_ptr(), inputs.data(), roles.workers,
                     static_cast<size_t>(elements), scale);
    stats.sum_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
    for (int w = 0; w < roles.workers; ++w) sends.push_back(comm.send(sum, w));
    sums.push_back(sum);
    const std::int64_t bytes = elements * static_cast<std::int64_t>(c10::elementSize(dtype));
    stats.bytes_in += bytes * roles.workers;
    stats.bytes_out += bytes * roles.workers;
  }
  for (const comm::WorkPtr& send : sends) {
    comm::wait_named(send, "ps server sending sums" + who, timeout);
  }
  if (first_arrival != Clock::time_point{}) {
    stats.active_seconds = std::chrono::duration<double>(Clock::now() - first_arrival).count();
  }
  return stats;
}

}  // namespace loom::parallel::ps
