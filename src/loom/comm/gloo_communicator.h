// The Gloo backend: c10d's ProcessGroupGloo over TCP, for ranks on any hosts. Gloo runs each
// operation on its own threads, so work overlaps the caller's computation.
//
// What Gloo lacks is filled in here: averaging (sum, then divide), reduce_scatter (all-reduce,
// then keep this rank's block: correct, not bandwidth-optimal), and errors that name the ranks
// that did not arrive (on failure each rank reports its position through the store).
#pragma once

#include <memory>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"

namespace c10d {
class ProcessGroupGloo;
}

namespace loom::comm {

class GlooCommunicator : public Communicator {
 public:
  // A group of `ranks` (all ranks of the job when empty); `name` keeps the store keys of several
  // groups apart. Ranks outside the group must not construct it.
  GlooCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options,
                   std::vector<int> ranks = {}, const std::string& name = "world");
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "gloo"; }

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override;
  WorkPtr recv(at::Tensor tensor, int peer) override;
  WorkPtr barrier() override;

 private:
  class GlooWork;
  // send (`sending`) or recv of `tensor` with `peer`, an error at posting kept in the Work.
  WorkPtr point_to_point(bool sending, const at::Tensor& tensor, int peer);
  std::string diagnose_stall(std::uint64_t sequence) const;

  std::shared_ptr<Rendezvous> rendezvous_;
  std::string name_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<int> ranks_;  // group rank -> job rank
  std::uint64_t sequence_ = 0;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
};

}  // namespace loom::comm
