#include "loom/parallel/ps/param_server.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "loom/comm/work_group.h"
#include "loom/core/error.h"
#include "loom/core/thread_cpu_time.h"
#include "loom/parallel/ps/ps_protocol.h"
#include "loom/parallel/ps/request_waiters.h"

namespace loom::parallel::ps {
namespace {

using Clock = std::chrono::steady_clock;

std::string worker_name(int w) { return "worker rank " + std::to_string(w); }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class ParamServer {
 public:
  ParamServer(comm::Communicator& world, const ParamServerOptions& options, ServerUpdate& update)
      : world_(world),
        options_(options),
        update_(update),
        server_(server_index(world, options.roles)),
        me_("ps server " + std::to_string(server_) + " (rank " + std::to_string(world.rank()) +
            ")"),
        timeout_(world.options().timeout),
        peers_(static_cast<size_t>(options.roles.workers)),
        waiters_(options.roles.workers, world.options().timeout) {}

  ServerLoad run() {
    init();
    while (std::any_of(peers_.begin(), peers_.end(), [](const Peer& p) { return !p.stopped; })) {
      for (const auto& [w, error] : waiters_.next()) {
        if (error) rethrow_named(w, error);
        handle(w);
      }
      reap_sends(false);
    }
    reap_sends(true);
    return load_;
  }

 private:
  struct Peer {
    at::Tensor header;        // its next request lands here
    std::int64_t pushed = 0;  // steps pushed, counted from the run's first (absolute)
    bool awaiting = false;    // pushed; its answer waits for slower workers (SSP)
    bool finished = false, told_finished = false, stopped = false;
  };
  struct Send {
    comm::WorkPtr work;
    at::Tensor message;  // kept alive until sent
    int worker;
  };

  int workers() const { return options_.roles.workers; }
  Peer& peer(int w) { return peers_[static_cast<size_t>(w)]; }

  void check_header(const StepHeader& h, int w) const {
    const std::string who = worker_name(w);
    if (h.job != options_.job) {
      throw Error(me_ + ": " + who + " belongs to another job (its job hash " +
                  std::to_string(h.job) + ", this job's " + std::to_string(options_.job) + ")");
    }
    if (h.workers != workers() || h.servers != options_.roles.servers) {
      throw Error(me_ + ": " + who + " counts " + std::to_string(h.workers) + " workers and " +
                  std::to_string(h.servers) + " servers, this server " + std::to_string(workers()) +
                  " and " + std::to_string(options_.roles.servers) +
                  " (is parallel.ps.servers the same everywhere?)");
    }
    if (!share_.empty() && (h.plan_fingerprint != fingerprint_ ||
                            h.parts != static_cast<std::int64_t>(share_.size()))) {
      throw Error(me_ + ": " + who + " sent " + describe(h) +
                  " with other parts than at its start (mismatched part plans)");
    }
  }

  // Blocking: every worker's init, in rank order; worker 0's parameters and optimizer state.
  void init() {
    std::vector<StepHeader> headers;
    for (int w = 0; w < workers(); ++w) {
      at::Tensor words = header_buffer();
      comm::wait_named(world_.recv(words, w), me_ + " waiting for the start of " + worker_name(w),
                       timeout_);
      headers.push_back(decode_header(words, worker_name(w)));
      const StepHeader& h = headers.back();
      check_header(h, w);
      if (h.command != Command::kInit) {
        throw Error(me_ + ": " + worker_name(w) + " sent " + describe(h) +
                    " first, expected init (is parallel.ps.mode the same on every rank?)");
      }
      if (h.step != headers[0].step || h.plan_fingerprint != headers[0].plan_fingerprint ||
          h.parts != headers[0].parts) {
        throw Error(me_ + ": " + worker_name(w) + " starts with " + describe(h) + ", but " +
                    worker_name(0) + " with " + describe(headers[0]) +
                    " (mismatched part plans, or ranks resumed from different checkpoints?)");
      }
    }
    const StepHeader& first = headers[0];
    if (first.dtype != static_cast<std::int64_t>(at::kFloat)) {
      throw Error(me_ + ": parameters of type " +
                  c10::toString(static_cast<c10::ScalarType>(first.dtype)) +
                  "; servers that hold parameters keep float");
    }
    for (int w = 0; w < workers(); ++w) {
      at::Tensor share = at::empty({first.parts}, at::kLong);
      if (first.parts > 0) {
        comm::wait_named(world_.recv(share, w), me_ + " receiving the share of " + worker_name(w),
                         timeout_);
      }
      std::vector<std::int64_t> sizes(share.data_ptr<std::int64_t>(),
                                      share.data_ptr<std::int64_t>() + first.parts);
      if (share_fingerprint(sizes, first.dtype) != first.plan_fingerprint) {
        throw Error(me_ + ": the part sizes " + worker_name(w) +
                    " sent do not match its header's fingerprint");
      }
      if (w == 0) share_ = std::move(sizes);
    }
    fingerprint_ = first.plan_fingerprint;
    params_ = receive_parts(0, "the first parameters");
    std::vector<at::Tensor> state;
    if (first.state_steps >= 0) {
      for (std::size_t p = 0; p < share_.size(); ++p) {
        for (int f = 0; f < update_.fields(); ++f) state.push_back(at::empty({share_[p]}));
      }
      receive_into(0, state, "the optimizer state");
    }
    update_.attach(params_, state, std::max<std::int64_t>(0, first.state_steps));
    applied_ = first.step;
    first_step_ = first.step;
    for (Peer& p : peers_) p.pushed = first.step;
    for (int w = 0; w < workers(); ++w) answer(w, /*with_state=*/false, 0);
  }

  // Receives worker w's next request: posted once it has its answer, so that the wait (bounded
  // by the timeout) covers the worker's own time, never time it spends held back here.
  void post(int w) {
    Peer& p = peer(w);
    p.header = header_buffer();
    waiters_.watch(w, world_.recv(p.header, w));
  }

  [[noreturn]] void rethrow_named(int w, const std::exception_ptr& error) const {
    try {
      std::rethrow_exception(error);
    } catch (const TimeoutError& e) {
      throw TimeoutError(
          me_ + ": no request from " + worker_name(w) + " within comm.timeout_s (it pushed " +
          std::to_string(peers_[static_cast<size_t>(w)].pushed) + " steps): " + e.what());
    } catch (const std::exception& e) {
      throw CommError(me_ + " receiving a request from " + worker_name(w) + ": " + e.what());
    }
  }

  void receive_into(int w, const std::vector<at::Tensor>& tensors, const std::string& what) {
    std::vector<comm::WorkPtr> receives;
    for (const at::Tensor& t : tensors) receives.push_back(world_.recv(t, w));
    for (const auto& r : receives) {
      comm::wait_named(r, me_ + " receiving " + what + " from " + worker_name(w), timeout_);
    }
    for (const at::Tensor& t : tensors) load_.bytes_in += t.nbytes();
  }

  std::vector<at::Tensor> receive_parts(int w, const std::string& what) {
    std::vector<at::Tensor> parts;
    for (std::int64_t n : share_) parts.push_back(at::empty({n}));
    receive_into(w, parts, what);
    return parts;
  }

  // The slowest worker's pushed steps: what every worker's pushes have reached.
  std::int64_t slowest() const {
    std::int64_t low = peers_[0].pushed;
    for (const Peer& p : peers_) low = std::min(low, p.pushed);
    return low;
  }
  // Steps of every worker that the parameters hold.
  std::int64_t held() const { return options_.bounded ? applied_ : slowest(); }

  void handle(int w) {
    const auto start = Clock::now();
    Peer& p = peer(w);
    const StepHeader h = decode_header(p.header, worker_name(w));
    check_header(h, w);
    switch (h.command) {
      case Command::kPush:
        push(w, h);
        break;
      case Command::kPull:
        answer(w, false, p.pushed - held());
        break;
      case Command::kFetch:
        answer(w, true, p.pushed - held());
        break;
      case Command::kFinish:
        p.finished = true;
        break;
      case Command::kStop:
        p.stopped = true;
        break;
      default:
        throw Error(me_ + ": " + worker_name(w) + " sent " + describe(h) + " after its start");
    }
    answer_waiting();
    load_.active_seconds += seconds_since(start);
    load_.busy_seconds = process_cpu_seconds() - cpu_at_start_;
  }

  void push(int w, const StepHeader& h) {
    Peer& p = peer(w);
    if (h.step != p.pushed || p.finished) {
      throw Error(
          me_ + ": " + worker_name(w) + " pushed step " + std::to_string(h.step) +
          (p.finished ? " after finishing" : ", expected step " + std::to_string(p.pushed)));
    }
    const auto begin = Clock::now();
    std::vector<at::Tensor> parts = receive_parts(w, "the push of step " + std::to_string(h.step));
    ++p.pushed;
    span("push from " + worker_name(w), h.step, begin);
    if (!options_.bounded) {
      const auto apply_begin = Clock::now();
      apply(parts, h.lr, 1.0 / workers());
      span("apply a push", h.step, apply_begin);
      answer(w, false, p.pushed - held());
      return;
    }
    auto& slot = pending_[h.step];
    slot.resize(static_cast<size_t>(workers()));
    slot[static_cast<size_t>(w)] = std::move(parts);
    if (w == 0) pending_lr_[h.step] = h.lr;
    p.awaiting = true;
    // Steps are applied in order, each once every worker has pushed it.
    for (auto it = pending_.find(applied_); it != pending_.end(); it = pending_.find(applied_)) {
      auto& pushes = it->second;
      if (std::any_of(pushes.begin(), pushes.end(), [](const auto& v) { return v.empty(); })) {
        break;
      }
      const auto sum_start = Clock::now();
      const std::int64_t step = applied_;
      std::vector<at::Tensor> mean = std::move(pushes[0]);
      for (std::size_t part = 0; part < mean.size(); ++part) {
        for (int o = 1; o < workers(); ++o) mean[part].add_(pushes[static_cast<size_t>(o)][part]);
        mean[part].mul_(1.0 / workers());
      }
      load_.sum_seconds += seconds_since(sum_start);
      apply(mean, pending_lr_[applied_], 1.0);
      span("apply a step", step, sum_start);
      pending_lr_.erase(applied_);
      pending_.erase(it);
      ++applied_;
    }
  }

  // A span for the hooks, from `begin` to now, of step `step` counted from the run's first.
  void span(const std::string& name, std::int64_t step, Clock::time_point begin) const {
    if (!options_.hooks.on_span) return;
    options_.hooks.on_span(name, step - first_step_, begin, Clock::now(),
                           "{\"bytes_in\":" + std::to_string(load_.bytes_in) +
                               ",\"bytes_out\":" + std::to_string(load_.bytes_out) + "}");
  }

  void apply(const std::vector<at::Tensor>& pushed, double lr, double weight) {
    const auto start = Clock::now();
    update_.apply(pushed, lr, weight);
    load_.sum_seconds += seconds_since(start);
    ++load_.steps;
    if (options_.on_step) options_.on_step(load_);
  }

  // Answers the workers whose answers were held back, where they now may go on.
  void answer_waiting() {
    for (int w = 0; w < workers(); ++w) {
      Peer& p = peer(w);
      if (p.awaiting && applied_ >= p.pushed - options_.staleness) {
        p.awaiting = false;
        answer(w, false, p.pushed - applied_);
      }
    }
    std::int64_t last = 0;
    for (const Peer& p : peers_) {
      if (!p.finished) return;
      last = std::max(last, p.pushed);
    }
    if (options_.bounded && applied_ < last) return;
    if (!workers_done_ && options_.hooks.on_workers_done) options_.hooks.on_workers_done();
    workers_done_ = true;
    for (int w = 0; w < workers(); ++w) {
      if (peer(w).told_finished) continue;
      peer(w).told_finished = true;
      answer(w, false, 0);
    }
  }

  void answer(int w, bool with_state, std::int64_t staleness) {
    Reply reply;
    reply.applied = held();
    reply.optimizer_steps = update_.steps();
    reply.staleness = staleness;
    load_.max_staleness = std::max(load_.max_staleness, staleness);
    std::vector<at::Tensor> messages;
    std::vector<at::Tensor> state;
    if (with_state) {
      state = update_.state();
      reply.state_fields = update_.fields();
    }
    messages.push_back(encode_reply(reply));
    for (const at::Tensor& part : params_) {
      messages.push_back(part.detach().clone());
      load_.bytes_out += part.nbytes();
    }
    for (const at::Tensor& t : state) messages.push_back(t.detach().clone());
    if (w == 0) messages.push_back(encode_load(load_));  // worker 0 reports the servers
    for (at::Tensor& m : messages) {
      comm::WorkPtr work = world_.send(m, w);
      sends_.push_back({std::move(work), std::move(m), w});
    }
    post(w);
  }

  void reap_sends(bool all) {
    while (!sends_.empty() && (all || sends_.front().work->completed())) {
      comm::wait_named(sends_.front().work,
                       me_ + " answering " + worker_name(sends_.front().worker), timeout_);
      sends_.pop_front();
    }
  }

  comm::Communicator& world_;
  const ParamServerOptions& options_;
  ServerUpdate& update_;
  const int server_;
  const std::string me_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::int64_t> share_;
  std::int64_t fingerprint_ = 0;
  std::vector<at::Tensor> params_;  // this server's parts
  std::vector<Peer> peers_;
  std::int64_t first_step_ = 0;
  bool workers_done_ = false;
  std::int64_t applied_ = 0;  // SSP: steps applied, counted from the run's first
  std::map<std::int64_t, std::vector<std::vector<at::Tensor>>> pending_;  // step -> pushes
  std::map<std::int64_t, double> pending_lr_;
  std::deque<Send> sends_;
  ServerLoad load_;
  const double cpu_at_start_ = process_cpu_seconds();
  RequestWaiters waiters_;  // last: its threads stop before the rest goes
};

}  // namespace

ServerLoad run_param_server(comm::Communicator& world, const ParamServerOptions& options,
                            ServerUpdate& update) {
  server_index(world, options.roles);
  if (options.bounded && options.staleness < 0) {
    throw ConfigError("parallel.ps.staleness: " + std::to_string(options.staleness) +
                      " is negative");
  }
  return ParamServer(world, options, update).run();
}

}  // namespace loom::parallel::ps
