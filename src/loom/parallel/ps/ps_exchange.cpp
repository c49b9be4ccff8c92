#include "loom/parallel/ps/ps_exchange.h"

#include <ATen/ATen.h>

#include "loom/comm/reduce_kernels.h"
#include "loom/core/error.h"

namespace loom::parallel::ps {
namespace {

using Clock = std::chrono::steady_clock;

std::string part_name(const PartPlan& plan, size_t index) {
  const Part& p = plan.parts[index];
  return "part " + std::to_string(index) + " (buffer " + std::to_string(p.buffer) + ", " +
         std::to_string(p.elements) + " elements) of server " + std::to_string(p.server);
}

// Waits for `work`, saying which part and peer an error is about.
void wait_for(const comm::WorkPtr& work, const std::string& what,
              std::chrono::milliseconds timeout) {
  try {
    work->wait(timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": " + e.what());
  } catch (const Error& e) {
    throw CommError(what + ": " + e.what());
  }
}

}  // namespace

void push_pull(comm::Communicator& comm, const PartPlan& plan,
               const std::vector<at::Tensor>& buffers, const PsRoles& roles,
               std::chrono::milliseconds timeout) {
  std::vector<at::Tensor> views;
  views.reserve(plan.parts.size());
  for (const Part& p : plan.parts) {
    if (p.buffer < 0 || static_cast<size_t>(p.buffer) >= buffers.size() ||
        p.offset + p.elements > buffers[static_cast<size_t>(p.buffer)].numel()) {
      throw Error("ps push: the plan's buffer " + std::to_string(p.buffer) + " is not among the " +
                  std::to_string(buffers.size()) + " given or too short");
    }
    views.push_back(buffers[static_cast<size_t>(p.buffer)].narrow(0, p.offset, p.elements));
  }
  // A part's sum cannot come back before the server has received this worker's part, so the
  // pull may land in the very memory the push reads from.
  std::vector<comm::WorkPtr> pushes, pulls;
  for (size_t i = 0; i < views.size(); ++i) {
    pushes.push_back(comm.send(views[i], roles.server_rank(plan.parts[i].server)));
  }
  for (size_t i = 0; i < views.size(); ++i) {
    pulls.push_back(comm.recv(views[i], roles.server_rank(plan.parts[i].server)));
  }
  const std::string who = " (worker rank " + std::to_string(comm.rank()) + ")";
  for (size_t i = 0; i < views.size(); ++i) {
    wait_for(pushes[i], "ps push of " + part_name(plan, i) + who, timeout);
  }
  for (size_t i = 0; i < views.size(); ++i) {
    wait_for(pulls[i], "ps pull of " + part_name(plan, i) + who, timeout);
  }
}

ServeStats serve_step(comm::Communicator& comm, const PartPlan& plan, int server,
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
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    if (plan.parts[i].server != server) continue;
    Incoming in{i, at::empty({roles.workers, plan.parts[i].elements}, dtype), {}};
    for (int w = 0; w < roles.workers; ++w) in.receives.push_back(comm.recv(in.rows[w], w));
    incoming.push_back(std::move(in));
  }
  ServeStats stats;
  std::vector<comm::WorkPtr> sends;
  std::vector<at::Tensor> sums;  // alive until sent
  const std::string who =
      " (server " + std::to_string(server) + ", rank " + std::to_string(comm.rank()) + ")";
  for (Incoming& in : incoming) {
    for (int w = 0; w < roles.workers; ++w) {
      wait_for(in.receives[static_cast<size_t>(w)],
               "ps server receiving " + part_name(plan, in.index) + " from worker rank " +
                   std::to_string(w) + who,
               timeout);
    }
    const auto begin = Clock::now();
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
    wait_for(send, "ps server sending sums" + who, timeout);
  }
  return stats;
}

}  // namespace loom::parallel::ps
