#include "loom/parallel/ps/ps_server.h"

#include <ATen/ATen.h>

#include "loom/comm/work_group.h"
#include "loom/core/error.h"
#include "loom/core/thread_cpu_time.h"
#include "loom/parallel/ps/ps_protocol.h"

namespace loom::parallel::ps {
namespace {

std::string worker_name(int w) { return "worker rank " + std::to_string(w); }

// Receives one message of `like`'s shape and type from every worker.
std::vector<at::Tensor> receive_from_workers(comm::Communicator& world, const PsRoles& roles,
                                             const at::Tensor& like, const std::string& what) {
  std::vector<at::Tensor> messages;
  std::vector<comm::WorkPtr> receives;
  for (int w = 0; w < roles.workers; ++w) {
    messages.push_back(at::empty_like(like));
    receives.push_back(world.recv(messages.back(), w));
  }
  for (int w = 0; w < roles.workers; ++w) {
    comm::wait_named(receives[static_cast<size_t>(w)], what + " from " + worker_name(w),
                     world.options().timeout);
  }
  return messages;
}

// The header every worker sent, once they are checked to agree with each other and the job.
StepHeader agreed_header(const std::vector<at::Tensor>& messages, const PsServerOptions& options,
                         std::int64_t step, const std::string& me) {
  std::vector<StepHeader> headers;
  for (size_t w = 0; w < messages.size(); ++w) {
    headers.push_back(decode_header(messages[w], worker_name(static_cast<int>(w))));
  }
  for (size_t w = 0; w < headers.size(); ++w) {
    const StepHeader& h = headers[w];
    const std::string who = worker_name(static_cast<int>(w));
    if (h.job != options.job) {
      throw Error("ps " + me + ": " + who + " belongs to another job (its job hash " +
                  std::to_string(h.job) + ", this job's " + std::to_string(options.job) + ")");
    }
    if (h.workers != options.roles.workers || h.servers != options.roles.servers) {
      throw Error("ps " + me + ": " + who + " counts " + std::to_string(h.workers) +
                  " workers and " + std::to_string(h.servers) + " servers, this server " +
                  std::to_string(options.roles.workers) + " and " +
                  std::to_string(options.roles.servers) +
                  " (is parallel.ps.servers the same everywhere?)");
    }
    if (h.step != step) {
      throw Error("ps " + me + ": " + who + " sent " + describe(h) + ", expected step " +
                  std::to_string(step));
    }
    if (!same_header(h, headers[0])) {
      throw Error("ps " + me + ": " + who + " sent " + describe(h) + ", but " + worker_name(0) +
                  " sent " + describe(headers[0]) +
                  " (mismatched part plans: do the workers run the same model and "
                  "parallel.ps.part_mb?)");
    }
  }
  return headers[0];
}

}  // namespace

ServerLoad run_server(comm::Communicator& world, const PsServerOptions& options) {
  const PsRoles& roles = options.roles;
  const int server = server_index(world, roles);
  const std::string me =
      "server " + std::to_string(server) + " (rank " + std::to_string(world.rank()) + ")";
  ServerLoad totals;
  const double cpu_at_start = process_cpu_seconds();
  std::vector<std::int64_t> share;
  StepHeader current;  // the plan in force: version, fingerprint, parts, type
  current.plan_version = -1;
  for (std::int64_t step = 0;; ++step) {
    const StepHeader h =
        agreed_header(receive_from_workers(
                          world, roles, header_buffer(),
                          "ps " + me + " waiting for the header of step " + std::to_string(step)),
                      options, step, me);
    if (h.command == Command::kStop) {
      // Worker 0 waits for this last word, so that what the hooks wrote is complete.
      if (options.hooks.on_workers_done) options.hooks.on_workers_done();
      comm::wait_named(world.send(encode_load(totals), 0),
                       "ps " + me + " sending its last totals to " + worker_name(0),
                       world.options().timeout);
      return totals;
    }
    if (h.command == Command::kPlan) {
      std::vector<std::int64_t> agreed;
      if (h.parts > 0) {
        const auto shares = receive_from_workers(
            world, roles, at::empty({h.parts}, at::kLong),
            "ps " + me + " receiving its share of plan " + std::to_string(h.plan_version));
        const std::int64_t* first = shares[0].data_ptr<std::int64_t>();
        agreed.assign(first, first + h.parts);
        for (size_t w = 1; w < shares.size(); ++w) {
          if (!shares[w].equal(shares[0])) {
            throw Error("ps " + me + ": " + worker_name(static_cast<int>(w)) +
                        "'s part sizes differ from " + worker_name(0) + "'s in plan " +
                        std::to_string(h.plan_version));
          }
        }
      }
      if (share_fingerprint(agreed, h.dtype) != h.plan_fingerprint) {
        throw Error("ps " + me + ": the share of plan " + std::to_string(h.plan_version) +
                    " does not match its header's fingerprint");
      }
      share = std::move(agreed);
      current = h;
    } else if (h.plan_version != current.plan_version ||
               h.plan_fingerprint != current.plan_fingerprint) {
      throw Error("ps " + me + ": the workers use plan " + std::to_string(h.plan_version) +
                  ", this server knows plan " + std::to_string(current.plan_version));
    }
    const auto begin = std::chrono::steady_clock::now();
    const ServeStats stats =
        serve_parts(world, share, server, static_cast<c10::ScalarType>(h.dtype), roles,
                    1.0 / roles.workers, world.options().timeout);
    if (options.hooks.on_span) {
      options.hooks.on_span("serve step", totals.steps, begin, std::chrono::steady_clock::now(),
                            "{\"bytes_in\":" + std::to_string(stats.bytes_in) +
                                ",\"bytes_out\":" + std::to_string(stats.bytes_out) +
                                ",\"sum_ms\":" + std::to_string(stats.sum_seconds * 1e3) + "}");
    }
    ++totals.steps;
    totals.bytes_in += stats.bytes_in;
    totals.bytes_out += stats.bytes_out;
    totals.sum_seconds += stats.sum_seconds;
    totals.active_seconds += stats.active_seconds;
    totals.busy_seconds = process_cpu_seconds() - cpu_at_start;
    const at::Tensor load = encode_load(totals);
    comm::wait_named(world.send(load, 0), "ps " + me + " sending its totals to " + worker_name(0),
                     world.options().timeout);
    if (options.on_step) options.on_step(totals);
  }
}

}  // namespace loom::parallel::ps
