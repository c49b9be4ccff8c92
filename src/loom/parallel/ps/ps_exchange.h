// One step's parameter-server exchange over a Communicator (issue 16), the part of it every mode
// shares: workers push the parts of their gradient buffers (part_plan.h) to the servers; each
// server sums a part over the workers and sends the sum back to every worker.
//
// Ranks [0, workers) train and ranks [workers, workers + servers) are servers. Every rank makes
// its calls in plan order, which is how the Communicator pairs sends with receives per peer; a
// part whose sizes differ between ranks, or a peer that is gone, fails with an error that names
// the part and the peer instead of hanging.
//
// Why push everything before waiting: every server works on its parts as soon as they arrive,
// and a worker's bytes go to all servers at once (BytePS's layout), so no server idles while
// another is sent a whole tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/parallel/ps/part_plan.h"

namespace loom::parallel::ps {

struct PsRoles {
  int workers = 1;
  int servers = 1;
  int server_rank(int server) const { return workers + server; }
  bool is_server(int rank) const { return rank >= workers; }
};

// What a server reports of its work besides its totals: a span of it (`name`, for step `step`:
// the server's own count, from 0), with details as a JSON object or empty; and, once, that the
// workers are done, before the server's last answer (a trace is closed there, so that worker 0
// finds it complete).
struct ServerHooks {
  std::function<void(const std::string& name, std::int64_t step,
                     std::chrono::steady_clock::time_point begin,
                     std::chrono::steady_clock::time_point end, const std::string& args_json)>
      on_span;
  std::function<void()> on_workers_done;
};

// "server 1 (rank 5 on host b)", for errors; `hosts` (per server) may be empty.
std::string server_name(const PsRoles& roles, int server, const std::vector<std::string>& hosts);
// This rank's server index; throws ConfigError naming parallel.ps.servers when `world` is not
// the workers then the servers, or this rank is not a server.
int server_index(const comm::Communicator& world, const PsRoles& roles);

// A worker's side for part `part` of the plan: pushes it from `flat` (its buffer: flat,
// contiguous) and posts the receive that overwrites it with its server's sum. Returns the send
// and the receive. A part's sum cannot come back before the server has received this worker's
// part, so the pull may land in the very memory the push reads from.
std::vector<comm::WorkPtr> start_part(comm::Communicator& comm, const PartPlan& plan, size_t part,
                                      const at::Tensor& flat, const PsRoles& roles);

// start_part() for every part of the plan, in plan order (`buffers`: the plan's buffers),
// waiting for all of it.
void push_pull(comm::Communicator& comm, const PartPlan& plan,
               const std::vector<at::Tensor>& buffers, const PsRoles& roles,
               std::chrono::milliseconds timeout);

struct ServeStats {
  std::int64_t bytes_in = 0, bytes_out = 0;
  double sum_seconds = 0;     // spent adding, the rest waiting for the network
  double active_seconds = 0;  // first part received to last sum sent
};

// The element counts of server `server`'s parts, in plan order: all a server needs to know.
std::vector<std::int64_t> server_share(const PartPlan& plan, int server);

// A server's side, given its share: receives each part from every worker, sums them times
// `scale` (1 / workers for a mean; bfloat16 accumulated in float, workers in rank order, so every
// run sums alike) and sends the result to every worker.
ServeStats serve_parts(comm::Communicator& comm, const std::vector<std::int64_t>& share, int server,
                       c10::ScalarType dtype, const PsRoles& roles, double scale,
                       std::chrono::milliseconds timeout);

// serve_parts() for server `server`'s share of `plan`.
ServeStats serve_step(comm::Communicator& comm, const PartPlan& plan, int server,
                      c10::ScalarType dtype, const PsRoles& roles, double scale,
                      std::chrono::milliseconds timeout);

}  // namespace loom::parallel::ps
