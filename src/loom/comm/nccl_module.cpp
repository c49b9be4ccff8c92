// The NCCL backend for CUDA tensors, in a module of its own (libloom_nccl.so) beside libloom: it
// links torch's CUDA libraries, which CPU hosts never load, and libloom (comm/device_backends.cpp)
// loads it at the first request for a CUDA backend. Loading registers "nccl" for CUDA.
//
// Over c10d's ProcessGroupNCCL from the torch wheel, with NCCL from the wheel's nvidia-nccl
// package: its collectives run on NCCL's own streams, ordered after the work the caller's stream
// queued before the call. Loom's Work::wait() makes the caller's stream wait for the collective
// (the host thread does not block), so reading the result on the device needs nothing more, and
// a host read of it (a copy to the CPU) waits on the stream as every such read does. A collective
// that does not finish within the timeout is reported by ProcessGroupNCCL's watchdog, which names
// it and ends the process.
//
// Point to point: an NCCL send blocks its stream until the receiver's matching receive runs, and
// one communicator's sends and receives share a stream. A pipeline's ranks send each other
// activations one way and gradients the other, in orders that only buffered sends can take on
// one stream (1F1B: each rank sends before it receives), so after prepare_peers each direction
// to each peer has a two-rank ProcessGroupNCCL of its own: its stream carries only that
// direction's messages, in the order both sides call them. Without prepare_peers, messages go
// over the group's own process group (fine for exchanges that alternate, one message at a time).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <map>
#include <set>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <tuple>

#include "loom/comm/device_backends.h"
#include "loom/core/error.h"

namespace loom::comm {
namespace {

// A c10d work as Loom's: waited for on the caller's stream.
class NcclWork : public Work {
 public:
  NcclWork(std::string what, c10::intrusive_ptr<c10d::Work> work)
      : Work(std::move(what)), work_(std::move(work)) {}

  // The caller's stream waits for the collective; the host goes on. (c10d's wait with a timeout
  // would hold the host until the GPU finished: a wait for the device at every bucket and
  // message.) The timeout is the process group's own, enforced by its watchdog.
  void wait(std::chrono::milliseconds /*timeout*/) override {
    try {
      work_->wait();
    } catch (const std::exception& e) {
      throw CommError(what() + ": " + e.what());
    }
    waited_at_ = std::chrono::steady_clock::now();
  }

  bool completed() const override { return work_->isCompleted(); }

  // When the host queued the stream's wait for it (NCCL's own end is on the device's clock, which
  // the host does not wait for): the data-parallel exchange's host times are the host's view.
  std::chrono::steady_clock::time_point finished_at() const override { return waited_at_; }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::chrono::steady_clock::time_point waited_at_ = std::chrono::steady_clock::now();
};

c10d::ReduceOp nccl_op(ReduceOp op) {
  return op == ReduceOp::kAvg ? c10d::ReduceOp(c10d::ReduceOp::AVG)
                              : c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// One direction between two ranks of a group (group ranks).
struct Direction {
  int from, to;
  bool operator<(const Direction& other) const {
    return std::tie(from, to) < std::tie(other.from, other.to);
  }
};

// The order in which every rank connects its channels: by the pair's lower rank, then its
// higher, then upwards before downwards. Each rank takes its own channels in this one order, so
// the earliest channel not yet connected always has both its ranks waiting at it.
bool connects_before(const Direction& a, const Direction& b) {
  const auto key = [](const Direction& d) {
    return std::make_tuple(std::min(d.from, d.to), std::max(d.from, d.to), d.from > d.to);
  };
  return key(a) < key(b);
}

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const DeviceBackendRequest& request)
      : Communicator(request.options),
        rank_(request.group_rank()),
        world_(static_cast<int>(request.ranks.size())),
        device_(request.device),
        name_(request.name),
        store_(request.rendezvous->store()) {
    if (at::detail::getCUDAHooks().getNumGPUs() == 0) {
      throw CommError("nccl: this process sees no CUDA device (rank " + std::to_string(rank_) +
                          " of " + std::to_string(world_) + ")",
                      {{"problem", "no_cuda"}});
    }
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = request.options.timeout;
    // The group's own key space in the job's store, where rank 0 publishes NCCL's unique id.
    auto store = c10::make_intrusive<c10d::PrefixStore>("nccl/" + name_, store_);
    const c10::DeviceGuard guard(device_);
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, world_, options);
      // Binds the communicator to this rank's GPU and connects now, not at the first collective.
      group_->setBoundDeviceId(device_);
      group_->eagerConnectSingleDevice(device_);
    } catch (const std::exception& e) {
      throw CommError("nccl: cannot connect rank " + std::to_string(rank_) + " of " +
                          std::to_string(world_) + " on " + device_.str() + ": " + e.what(),
                      {{"problem", "nccl_connect"}});
    }
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override {
    check(tensor, "allreduce");
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = nccl_op(op);
    return started("allreduce", tensor, group_->allreduce(tensors, options));
  }

  WorkPtr broadcast(at::Tensor tensor, int root) override {
    check(tensor, "broadcast");
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    return started("broadcast", tensor, group_->broadcast(tensors, options));
  }

  WorkPtr allgather(at::Tensor input, at::Tensor output) override {
    check(input, "allgather");
    check(output, "allgather");
    return started("allgather", input, group_->_allgather_base(output, input));
  }

  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    check(input, "reduce_scatter");
    check(output, "reduce_scatter");
    c10d::ReduceScatterOptions options;
    options.reduceOp = nccl_op(op);
    return started("reduce_scatter", input, group_->_reduce_scatter_base(output, input, options));
  }

  WorkPtr send(at::Tensor tensor, int peer) override {
    check(tensor, "send");
    std::vector<at::Tensor> tensors{tensor};
    if (auto channel = channels_.find({rank_, peer}); channel != channels_.end()) {
      return started("send", tensor, channel->second->send(tensors, /*dstRank=*/1, 0));
    }
    return started("send", tensor, group_->send(tensors, peer, 0));
  }

  WorkPtr recv(at::Tensor tensor, int peer) override {
    check(tensor, "recv");
    std::vector<at::Tensor> tensors{tensor};
    if (auto channel = channels_.find({peer, rank_}); channel != channels_.end()) {
      return started("recv", tensor, channel->second->recv(tensors, /*srcRank=*/0, 0));
    }
    return started("recv", tensor, group_->recv(tensors, peer, 0));
  }

  WorkPtr barrier() override { return started("barrier", {}, group_->barrier()); }

  void prepare_peers(const std::vector<int>& peers) override {
    std::set<Direction> wanted;
    for (int peer : peers) {
      if (peer == rank_ || peer < 0 || peer >= world_) continue;
      for (const Direction d : {Direction{rank_, peer}, Direction{peer, rank_}}) {
        if (!channels_.count(d)) wanted.insert(d);
      }
    }
    std::vector<Direction> order(wanted.begin(), wanted.end());
    std::sort(order.begin(), order.end(), connects_before);
    for (const Direction& d : order) channels_[d] = connected_channel(d);
  }

 private:
  void check(const at::Tensor& tensor, const char* operation) const {
    if (!tensor.defined() || tensor.device() != device_ || !tensor.is_contiguous()) {
      throw CommError(std::string(operation) + ": nccl moves contiguous tensors on " +
                          device_.str() + ", this one is " +
                          (tensor.defined() ? tensor.device().str() : std::string("undefined")) +
                          " (rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ")",
                      {{"problem", "device"}});
    }
  }

  WorkPtr started(const char* operation, const at::Tensor& tensor,
                  c10::intrusive_ptr<c10d::Work> work) {
    return std::make_shared<NcclWork>(describe_call(operation, sequence_++, tensor),
                                      std::move(work));
  }

  // A two-rank process group for direction `d` (the sender its rank 0), connected: a first
  // one-element message crosses it, so that NCCL makes the communicator its sends and receives
  // use now, with both ranks here, and not at the first real message, which would hold the
  // sender's host until the receiver's reached the same message.
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> connected_channel(const Direction& d) {
    const bool sends = d.from == rank_;
    const int peer = sends ? d.to : d.from;
    const std::string what = std::string(sends ? "sending to" : "receiving from") + " rank " +
                             std::to_string(peer) + " (rank " + std::to_string(rank_) + " of " +
                             std::to_string(world_) + " on " + device_.str() + ")";
    const std::string channel_name =
        "nccl/" + name_ + "/p2p/" + std::to_string(d.from) + ">" + std::to_string(d.to);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = this->options().timeout;
    options->group_name = channel_name;  // what the watchdog's reports name
    auto store = c10::make_intrusive<c10d::PrefixStore>(channel_name, store_);
    const c10::DeviceGuard guard(device_);
    try {
      auto channel = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, sends ? 0 : 1, 2, options);
      std::vector<at::Tensor> first{at::zeros({1}, at::TensorOptions().device(device_))};
      auto work = sends ? channel->send(first, 1, 0) : channel->recv(first, 0, 0);
      work->wait(this->options().timeout);
      return channel;
    } catch (const std::exception& e) {
      throw CommError("nccl: cannot open the channel for " + what + ": " + e.what(),
                      {{"problem", "nccl_connect"}, {"peer", std::to_string(peer)}});
    }
  }

  int rank_, world_;
  c10::Device device_;
  std::string name_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  std::map<Direction, c10::intrusive_ptr<c10d::ProcessGroupNCCL>> channels_;
  std::uint64_t sequence_ = 0;
};

// NCCL drives one GPU per rank: two ranks of one host on one GPU is an error to NCCL.
std::string why_not_nccl(const DeviceBackendRequest& request) {
  std::set<std::string> seen;
  for (const std::string& device : request.devices) {
    if (!seen.insert(device).second) {
      return "two ranks share " + device.substr(0, device.find('@')) +
             " on one host, and NCCL drives one GPU per rank";
    }
  }
  return {};
}

}  // namespace
}  // namespace loom::comm

extern "C" __attribute__((visibility("default"))) void loom_register_nccl_backend() {
  loom::comm::DeviceBackend backend;
  backend.name = "nccl";
  backend.why_not = loom::comm::why_not_nccl;
  backend.make = [](const loom::comm::DeviceBackendRequest& request) {
    return std::unique_ptr<loom::comm::Communicator>(
        std::make_unique<loom::comm::NcclCommunicator>(request));
  };
  loom::comm::register_device_backend(c10::kCUDA, std::move(backend));
}
