// A debugging decorator over any communicator: before every collective, the ranks exchange a
// description of the call (sequence number, kind, element count, type, root) and compare them,
// so a rank that broke the ordering contract is reported by name instead of leaving the others
// hanging. shm and tcp check each call's size and type themselves, between the ranks that
// exchange data; this check compares every rank's call with every other's, for any backend.
// send/recv pass through unchecked: only two ranks take part.
#pragma once

#include <memory>

#include "loom/comm/communicator.h"

namespace loom::comm {

class CheckedCommunicator : public Communicator {
 public:
  explicit CheckedCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  std::string backend() const override { return inner_->backend() + "+checked"; }

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override { return inner_->send(tensor, peer); }
  WorkPtr recv(at::Tensor tensor, int peer) override { return inner_->recv(tensor, peer); }
  void prepare_peers(const std::vector<int>& peers) override { inner_->prepare_peers(peers); }
  WorkPtr barrier() override;

 private:
  // Throws CommError naming the first rank whose call differs from this one.
  void check(int kind, const at::Tensor& tensor, int root);

  std::unique_ptr<Communicator> inner_;
  std::int64_t sequence_ = 0;
};

}  // namespace loom::comm
