#include "loom/parallel/ps/remote_parameters.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "loom/comm/broadcast_coalesced.h"
#include "loom/comm/work_group.h"
#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::parallel::ps {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

RemoteParameters::RemoteParameters(models::NamedTensors parameters, models::NamedTensors buffers,
                                   comm::Communicator& workers, comm::Communicator& world,
                                   RemoteParametersOptions options)
    : parameters_(std::move(parameters)),
      buffers_(std::move(buffers)),
      workers_(workers),
      world_(world),
      options_(std::move(options)),
      layout_(parameters_),
      step_(options_.first_step),
      servers_(options_.server_hosts) {
  const PsRoles& roles = options_.roles;
  if (roles.workers != workers.world() || roles.workers + roles.servers != world.world() ||
      world.rank() >= roles.workers) {
    throw ConfigError("parallel.ps.servers: " + std::to_string(roles.servers) + " servers and " +
                      std::to_string(roles.workers) + " workers do not make the job's " +
                      std::to_string(world.world()) + " ranks with this rank (" +
                      std::to_string(world.rank()) + ") a worker");
  }
  plan_ = plan_parts({layout_.elements()}, sizeof(float), options_.part_bytes, roles.servers);
  servers_.set_largest_part_bytes(plan_.largest_part_bytes());
  parts_of_.resize(static_cast<size_t>(roles.servers));
  for (std::size_t p = 0; p < plan_.parts.size(); ++p) {
    parts_of_[static_cast<size_t>(plan_.parts[p].server)].push_back(p);
  }
  flat_ = layout_.flatten(parameter_tensors());
  request(Command::kInit, 0, at::Tensor());
  options_.state.reset();  // the servers hold it now
}

RemoteParameters::~RemoteParameters() {
  if (broken_) return;
  try {
    request(Command::kStop, 0, at::Tensor());
  } catch (const std::exception& e) {
    LOOM_LOG(kWarn, "ps") << "could not tell the servers to stop: " << e.what();
  }
}

std::vector<at::Tensor> RemoteParameters::parameter_tensors() const {
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : parameters_) tensors.push_back(p);
  return tensors;
}

std::string RemoteParameters::server_name(int server) const {
  return ps::server_name(options_.roles, server, options_.server_hosts);
}

void RemoteParameters::zero_grad() {
  for (auto& [name, p] : parameters_) p.mutable_grad().reset();
}

RemoteParameters::Answer RemoteParameters::request(Command command, double lr,
                                                   const at::Tensor& payload) {
  broken_ = true;  // until the servers have answered
  const bool leader = world_.rank() == 0;
  const int fields = command == Command::kFetch ? options_.state_fields : 0;
  Answer answer;
  for (int f = 0; f < fields; ++f) answer.state.push_back(at::zeros({layout_.elements()}));
  struct Pending {
    comm::WorkPtr work;
    std::string what;
  };
  std::vector<Pending> sends, receives;
  std::vector<at::Tensor> keep, replies, loads;
  for (int s = 0; s < options_.roles.servers; ++s) {
    const auto& mine = parts_of_[static_cast<size_t>(s)];
    const int peer = options_.roles.server_rank(s);
    const std::vector<std::int64_t> share = server_share(plan_, s);
    const auto part_of = [&](const at::Tensor& flat, std::size_t p) {
      return flat.narrow(0, plan_.parts[p].offset, plan_.parts[p].elements);
    };
    StepHeader header = make_header(options_.job, step_, command, options_.roles.workers,
                                    options_.roles.servers, 1, share, at::kFloat);
    header.lr = lr;
    const bool with_state = command == Command::kInit && leader && options_.state;
    if (with_state) header.state_steps = options_.state->steps;
    std::vector<at::Tensor> out{encode_header(header)};
    if (command == Command::kInit && !share.empty()) out.push_back(at::tensor(share, at::kLong));
    if (command == Command::kInit && leader) {
      for (std::size_t p : mine) out.push_back(part_of(flat_, p));
      for (std::size_t p : mine) {
        for (int f = 0; with_state && f < options_.state_fields; ++f) {
          out.push_back(part_of(options_.state->fields.at(static_cast<size_t>(f)), p));
        }
      }
    }
    if (command == Command::kPush) {
      for (std::size_t p : mine) out.push_back(part_of(payload, p));
    }
    const std::string to = std::string("ps ") + command_name(command) + " of step " +
                           std::to_string(step_) + " to " + server_name(s);
    for (at::Tensor& t : out) {
      sends.push_back({world_.send(t, peer), to});
      keep.push_back(std::move(t));
    }
    if (command == Command::kStop) continue;
    const std::string from = std::string("ps ") + command_name(command) + " of step " +
                             std::to_string(step_) + ": the answer of " + server_name(s);
    replies.push_back(at::zeros({kReplyWords}, at::kLong));
    receives.push_back({world_.recv(replies.back(), peer), from});
    for (std::size_t p : mine) receives.push_back({world_.recv(part_of(flat_, p), peer), from});
    for (std::size_t p : mine) {
      for (int f = 0; f < fields; ++f) {
        receives.push_back(
            {world_.recv(part_of(answer.state[static_cast<size_t>(f)], p), peer), from});
      }
    }
    if (leader) {
      loads.push_back(at::zeros({kLoadWords}, at::kDouble));
      receives.push_back({world_.recv(loads.back(), peer), from});
    }
  }
  const auto timeout = world_.options().timeout;
  for (const Pending& p : sends) comm::wait_named(p.work, p.what, timeout);
  for (const Pending& p : receives) comm::wait_named(p.work, p.what, timeout);
  if (command != Command::kStop) {
    for (std::size_t s = 0; s < replies.size(); ++s) {
      const Reply reply = decode_reply(replies[s], server_name(static_cast<int>(s)));
      if (reply.state_fields != fields) {
        throw Error("ps: " + server_name(static_cast<int>(s)) + " sent " +
                    std::to_string(reply.state_fields) + " optimizer state tensors per part, " +
                    "expected " + std::to_string(fields) +
                    " (is optimizer.name the same on every rank?)");
      }
      answer.staleness = std::max(answer.staleness, reply.staleness);
      answer.optimizer_steps = std::max(answer.optimizer_steps, reply.optimizer_steps);
    }
    if (leader) {
      std::vector<ServerLoad> totals;
      for (const at::Tensor& load : loads) totals.push_back(decode_load(load));
      servers_.heard(std::move(totals));
    }
    at::NoGradGuard no_grad;
    layout_.scatter(flat_, parameter_tensors());
  }
  broken_ = false;
  return answer;
}

void RemoteParameters::step(double lr, const std::function<void()>& local_step) {
  at::Tensor payload;
  {
    at::NoGradGuard no_grad;
    if (options_.optimizer_on_server) {
      std::vector<at::Tensor> gradients;
      for (const auto& [name, p] : parameters_) gradients.push_back(p.grad());
      payload = layout_.flatten(gradients);
    } else {
      local_step();  // the worker's optimizer moves its copy; the servers get the move
      payload = layout_.flatten(parameter_tensors()).sub_(flat_);
    }
  }
  const auto start = Clock::now();
  const Answer answer = request(Command::kPush, lr, payload);
  ++step_;
  stats_.buckets = 1;
  stats_.bytes = 2 * static_cast<std::size_t>(layout_.elements()) * sizeof(float);
  stats_.comm_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  stats_.exposed_seconds = stats_.comm_seconds;  // nothing overlaps the push and pull
  servers_.pulled(answer.staleness);
}

void RemoteParameters::sync_buffers() {
  std::vector<at::Tensor> tensors;
  for (auto& [name, t] : buffers_) {
    if (t.is_floating_point()) tensors.push_back(t);
  }
  if (workers_.world() > 1) {
    if (!tensors.empty()) comm::broadcast_coalesced(tensors, workers_);
    // Past this point every worker has pushed every step, so all pull the same parameters.
    comm::wait_named(workers_.barrier(), "ps: the workers meeting before an evaluation",
                     workers_.options().timeout);
  }
  request(Command::kPull, 0, at::Tensor());
}

void RemoteParameters::end_training() { request(Command::kFinish, 0, at::Tensor()); }

std::optional<HeldOptimizerState> RemoteParameters::held_optimizer_state() {
  if (!options_.optimizer_on_server) return std::nullopt;
  Answer answer = request(Command::kFetch, 0, at::Tensor());
  return HeldOptimizerState{std::move(answer.state), answer.optimizer_steps};
}

std::string RemoteParameters::describe() const {
  std::string mode = options_.mode;
  if (mode == "ssp") mode += " s=" + std::to_string(options_.staleness);
  return "parameter servers over " + world_.backend() + " (" + mode + ", optimizer on the " +
         (options_.optimizer_on_server ? "servers" : "workers") + "): " + plan_.describe();
}

}  // namespace loom::parallel::ps
