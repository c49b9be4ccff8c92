#include "loom/comm/gloo_communicator.h"

// ProcessGroupGloo's header is empty unless this is defined; Debian's LibTorch is built with it.
#define USE_C10D_GLOO 1
#include <algorithm>
#include <functional>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "loom/core/error.h"
#include "loom/core/settings.h"

namespace loom::comm {

// Wraps a c10d work; `then` runs once after it succeeds (averaging, copying a block out).
class GlooCommunicator::GlooWork : public Work {
 public:
  GlooWork(std::string what, c10::intrusive_ptr<c10d::Work> work, std::function<void()> then,
           const GlooCommunicator* owner, std::uint64_t sequence)
      : Work(std::move(what)),
        work_(std::move(work)),
        then_(std::move(then)),
        owner_(owner),
        sequence_(sequence) {}

  void wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(wait_mutex_);
    if (!Work::completed()) {
      try {
        if (!work_->wait(timeout)) throw TimeoutError("gloo wait returned early");
        if (then_) then_();
        finish();
      } catch (const std::exception& e) {
        finish(std::make_exception_ptr(
            CommError(what() + " failed on " + owner_->rendezvous_->describe_rank() + ": " +
                      first_line(e.what()) + owner_->diagnose_stall(sequence_))));
      }
    }
    Work::wait(std::chrono::milliseconds(0));
  }

  bool completed() const override { return Work::completed() || work_->isCompleted(); }

 private:
  static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

  std::mutex wait_mutex_;
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> then_;
  const GlooCommunicator* owner_;
  std::uint64_t sequence_;
};

namespace {

// Gloo starts send and recv on the pair at once, and throws there when the peer's connection is
// already gone. That error belongs in the Work: callers wait on it and say whom it was for
// (a parameter server names the worker, a worker the server).
WorkPtr failed_at_start(const std::string& what, const std::string& who, const std::exception& e) {
  const std::string text = e.what();
  auto work = std::make_shared<Work>(what);
  work->finish(std::make_exception_ptr(
      CommError(what + " failed on " + who + ": " + text.substr(0, text.find('\n')))));
  return work;
}

std::shared_ptr<::gloo::transport::Device> make_device(const Rendezvous& rendezvous) {
  std::string host = setting("LOOM_GLOO_HOST");
  if (host.empty()) host = rendezvous.host_count() == 1 ? "127.0.0.1" : "";
  return host.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                      : c10d::ProcessGroupGloo::createDeviceForHostname(host);
}

}  // namespace

GlooCommunicator::GlooCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options,
                                   std::vector<int> ranks, const std::string& name)
    : Communicator(options),
      rendezvous_(std::move(rendezvous)),
      name_(name),
      ranks_(std::move(ranks)) {
  if (ranks_.empty()) {
    for (int r = 0; r < rendezvous_->world(); ++r) ranks_.push_back(r);
  }
  auto me = std::find(ranks_.begin(), ranks_.end(), rendezvous_->rank());
  if (me == ranks_.end()) throw CommError("gloo: rank is not a member of group '" + name + "'");
  rank_ = static_cast<int>(me - ranks_.begin());
  world_ = static_cast<int>(ranks_.size());

  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  gloo_options->devices.push_back(make_device(*rendezvous_));
  gloo_options->threads = 2;
  auto store = c10::make_intrusive<c10d::PrefixStore>("loom/gloo/" + name, rendezvous_->store());
  try {
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, world_, gloo_options);
  } catch (const std::exception& e) {
    throw CommError("gloo: " + rendezvous_->describe_rank() + " could not connect group '" + name +
                    "': " + std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
  }
}

GlooCommunicator::~GlooCommunicator() = default;

std::string GlooCommunicator::diagnose_stall(std::uint64_t sequence) const {
  // Every rank that fails posts the operation it stopped in; ranks that never post are dead or
  // stuck elsewhere. A grace period of two seconds lets the others' timeouts fire too.
  const std::string key = "loom/gloo/" + name_ + "/stalled/";
  auto& store = *rendezvous_->store();
  const std::string mine = std::to_string(sequence);
  try {
    store.set(key + std::to_string(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
  } catch (const std::exception&) {
    return " (the store is unreachable too: rank 0, which serves it, has probably exited)";
  }
  std::vector<int> silent;
  for (int attempt = 0; attempt < 20; ++attempt) {
    silent.clear();
    for (int r = 0; r < world_; ++r) {
      if (r != rank_ && !store.check({key + std::to_string(r)})) silent.push_back(r);
    }
    if (silent.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string report;
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const bool is_silent = std::find(silent.begin(), silent.end(), r) != silent.end();
    std::string where = "never reached it (dead, or stuck before it)";
    if (!is_silent) {
      const auto value = store.get(key + std::to_string(r));
      const std::string theirs(value.begin(), value.end());
      if (theirs == mine) continue;
      where = "failed in operation #" + theirs;
    }
    report += (report.empty() ? "" : "; ") + std::string("rank ") + std::to_string(ranks_[r]) +
              " " + where;
  }
  if (report.empty()) return " (every rank of the group failed in this operation)";
  return " (" + report + ")";
}

static c10d::ReduceOp sum_op() { return c10d::ReduceOp(c10d::ReduceOp::SUM); }

// Gloo in LibTorch 1.13 reduces no bfloat16: such tensors are reduced as float (the same
// accumulation precision the shm backend uses) and rounded back once. Moves of bfloat16 data
// (broadcast, allgather, send/recv) go as the bytes of a same-sized type.
static at::Tensor as_gloo_bytes(const at::Tensor& tensor) {
  return tensor.scalar_type() == at::kBFloat16 ? tensor.view(at::kHalf) : tensor;
}

WorkPtr GlooCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce", rank_, world_);
  const bool widen = tensor.scalar_type() == at::kBFloat16;
  at::Tensor reduced = widen ? tensor.to(at::kFloat) : tensor;
  std::vector<at::Tensor> tensors{reduced};
  c10d::AllreduceOptions opts;
  opts.reduceOp = sum_op();
  std::function<void()> then;
  if (op == ReduceOp::kAvg || widen) {
    then = [tensor, reduced, widen, divisor = op == ReduceOp::kAvg ? world_ : 1]() mutable {
      if (divisor != 1) reduced.div_(divisor);
      if (widen) tensor.copy_(reduced);
    };
  }
  const auto seq = ++sequence_;
  return std::make_shared<GlooWork>(describe_call("allreduce", seq, tensor),
                                    group_->allreduce(tensors, opts), then, this, seq);
}

WorkPtr GlooCommunicator::broadcast(at::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast", rank_, world_);
  if (root < 0 || root >= world_)
    throw CommError("broadcast: root " + std::to_string(root) + " is not a rank");
  std::vector<at::Tensor> tensors{as_gloo_bytes(tensor)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  const auto seq = ++sequence_;
  return std::make_shared<GlooWork>(describe_call("broadcast", seq, tensor),
                                    group_->broadcast(tensors, opts), nullptr, this, seq);
}

WorkPtr GlooCommunicator::allgather(at::Tensor input, at::Tensor output) {
  check_tensor(input, "allgather", rank_, world_);
  check_tensor(output, "allgather", rank_, world_);
  if (output.numel() != input.numel() * world_ || output.scalar_type() != input.scalar_type()) {
    throw CommError("allgather: output has " + std::to_string(output.numel()) +
                    " elements, expected " + std::to_string(input.numel() * world_));
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  const auto blocks = as_gloo_bytes(output).view({world_, input.numel()});
  for (int r = 0; r < world_; ++r) outputs[0].push_back(blocks[r]);
  std::vector<at::Tensor> inputs{as_gloo_bytes(input).view({input.numel()})};
  const auto seq = ++sequence_;
  return std::make_shared<GlooWork>(describe_call("allgather", seq, input),
                                    group_->allgather(outputs, inputs), nullptr, this, seq);
}

WorkPtr GlooCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  check_tensor(input, "reduce_scatter", rank_, world_);
  check_tensor(output, "reduce_scatter", rank_, world_);
  if (input.numel() != output.numel() * world_) {
    throw CommError(
        "reduce_scatter: input has " + std::to_string(input.numel()) +
        " elements, expected world x output = " + std::to_string(output.numel() * world_));
  }
  // ProcessGroupGloo has no reduce_scatter: reduce a copy of everything, keep our block.
  auto whole = input.scalar_type() == at::kBFloat16 ? input.to(at::kFloat) : input.clone();
  std::vector<at::Tensor> tensors{whole};
  c10d::AllreduceOptions opts;
  opts.reduceOp = sum_op();
  auto then = [whole, output, r = rank_, n = world_, op]() mutable {
    auto block = whole.view({n, output.numel()})[r];
    if (op == ReduceOp::kAvg) block.div_(n);
    output.view({output.numel()}).copy_(block);
  };
  const auto seq = ++sequence_;
  return std::make_shared<GlooWork>(describe_call("reduce_scatter", seq, input),
                                    group_->allreduce(tensors, opts), then, this, seq);
}

WorkPtr GlooCommunicator::point_to_point(bool sending, const at::Tensor& tensor, int peer) {
  const char* op = sending ? "send" : "recv";
  check_tensor(tensor, op, rank_, world_);
  check_peer(peer, op, rank_, world_);
  std::vector<at::Tensor> tensors{as_gloo_bytes(tensor)};
  const auto seq = ++sequence_;
  std::string what = describe_call(op, seq, tensor) + (sending ? " to rank " : " from rank ") +
                     std::to_string(peer);
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = sending ? group_->send(tensors, peer, 0) : group_->recv(tensors, peer, 0);
  } catch (const std::exception& e) {
    return failed_at_start(what, rendezvous_->describe_rank(), e);
  }
  return std::make_shared<GlooWork>(std::move(what), std::move(work), nullptr, this, seq);
}

WorkPtr GlooCommunicator::send(at::Tensor tensor, int peer) {
  return point_to_point(true, tensor, peer);
}

WorkPtr GlooCommunicator::recv(at::Tensor tensor, int peer) {
  return point_to_point(false, tensor, peer);
}

WorkPtr GlooCommunicator::barrier() {
  const auto seq = ++sequence_;
  return std::make_shared<GlooWork>(describe_call("barrier", seq, at::Tensor()), group_->barrier(),
                                    nullptr, this, seq);
}

}  // namespace loom::comm
