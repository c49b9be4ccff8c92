// One communicator over several backends, each moving the tensors of one device type, as c10d's
// ProcessGroup keeps a backend per device type: a run on GPUs all-reduces its gradient buckets
// through NCCL (or through host memory) while its scalars, checkpoint agreement and model checks
// stay on the host backend. Each call goes to the backend of its tensors' device type; a call
// whose tensors sit on two device types is refused (CommError), as is one on a device type
// without a backend.
//
// Ordering: each backend runs its own calls in call order. Every rank makes the same calls in
// the same order, so each backend's calls match across ranks too. Sends and receives pair up per
// peer within each backend: a receiver takes a message on the backend of the sender's tensor's
// device type (comm/tensor_message's header says which).
#pragma once

#include <c10/core/DeviceType.h>

#include <memory>

#include "loom/comm/communicator.h"

namespace loom::comm {

class PerDeviceCommunicator : public Communicator {
 public:
  // `device` moves `device_type`'s tensors; `host` the CPU's and, for a barrier, nobody's.
  // `device` may refer to `host` (a staging backend): it is destroyed first.
  PerDeviceCommunicator(std::unique_ptr<Communicator> host, c10::DeviceType device_type,
                        std::unique_ptr<Communicator> device);
  ~PerDeviceCommunicator() override;

  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  // "cpu:shm,cuda:nccl", as c10d names a process group's backends.
  std::string backend() const override;

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override;
  WorkPtr recv(at::Tensor tensor, int peer) override;
  WorkPtr barrier() override { return host_->barrier(); }
  void prepare_peers(const std::vector<int>& peers) override;

  Communicator& host() { return *host_; }
  Communicator& device() { return *device_; }

 private:
  // The backend for a call on `first` (and `second`, when the call has two tensors).
  Communicator& backend_for(const char* operation, const at::Tensor& first,
                            const at::Tensor& second = {});

  std::unique_ptr<Communicator> host_;
  c10::DeviceType device_type_;
  std::unique_ptr<Communicator> device_;
};

}  // namespace loom::comm
