// The "auto" backend for ranks on several hosts: shared memory inside each host, tcp between
// hosts. An all-reduce sums inside every host over shm, then the hosts' first ranks ("leaders")
// all-reduce those sums over tcp, then each leader shares the result with its host over shm:
// only one rank per host touches the network, and with 1/ranks-per-host of the traffic a flat
// tcp ring would send. Broadcast and barrier are staged the same way. allgather,
// reduce_scatter, send and recv go over a tcp group of all ranks (correct, not staged).
//
// Threading: operations run in call order on one thread of their own, which drives the stages.
#pragma once

#include <memory>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/serial_executor.h"

namespace loom::comm {

class HierarchicalCommunicator : public Communicator {
 public:
  HierarchicalCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options);
  ~HierarchicalCommunicator() override;

  int rank() const override { return rendezvous_->rank(); }
  int world() const override { return rendezvous_->world(); }
  std::string backend() const override;

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override;
  WorkPtr recv(at::Tensor tensor, int peer) override;
  WorkPtr barrier() override;

 private:
  bool leader() const { return leaders_ != nullptr; }
  void wait(const WorkPtr& work) { work->wait(options().timeout); }

  std::shared_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<Communicator> host_;     // shm: the ranks of this host
  std::unique_ptr<Communicator> leaders_;  // tcp: the first rank of every host (null elsewhere)
  std::unique_ptr<Communicator> all_;      // tcp: every rank
  std::vector<int> leader_of_host_;        // host -> its first rank
  std::uint64_t sequence_ = 0;
  std::unique_ptr<SerialExecutor> stages_;  // declared last: joined first
};

}  // namespace loom::comm
