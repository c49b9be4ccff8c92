#include "loom/comm/hierarchical_communicator.h"

#include "loom/comm/shm_communicator.h"
#include "loom/comm/tcp_communicator.h"

namespace loom::comm {

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<Rendezvous> rendezvous,
                                                   CommOptions options)
    : Communicator(options), rendezvous_(std::move(rendezvous)) {
  const int hosts = rendezvous_->host_count();
  const int my_host = rendezvous_->host_of_rank()[rendezvous_->rank()];
  std::vector<int> leaders;
  for (int h = 0; h < hosts; ++h) leaders.push_back(rendezvous_->ranks_on_host(h).front());
  leader_of_host_ = leaders;
  host_ = std::make_unique<ShmCommunicator>(rendezvous_, options,
                                            rendezvous_->ranks_on_host(my_host), "host");
  if (rendezvous_->rank() == leaders[my_host]) {
    leaders_ = std::make_unique<TcpCommunicator>(rendezvous_, options, leaders, "leaders");
  }
  all_ = std::make_unique<TcpCommunicator>(rendezvous_, options, std::vector<int>{}, "all");
  stages_ = std::make_unique<SerialExecutor>();
}

HierarchicalCommunicator::~HierarchicalCommunicator() { stages_.reset(); }

std::string HierarchicalCommunicator::backend() const {
  return "auto(shm x " + std::to_string(rendezvous_->host_count()) + " hosts + tcp)";
}

WorkPtr HierarchicalCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce", rank(), world());
  return stages_->submit(describe_call("allreduce", ++sequence_, tensor), [this, tensor, op] {
    wait(host_->allreduce(tensor, ReduceOp::kSum));
    if (leader()) wait(leaders_->allreduce(tensor, ReduceOp::kSum));
    wait(host_->broadcast(tensor, 0));
    if (op == ReduceOp::kAvg) tensor.div_(world());
  });
}

WorkPtr HierarchicalCommunicator::broadcast(at::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast", rank(), world());
  return stages_->submit(describe_call("broadcast", ++sequence_, tensor), [this, tensor, root] {
    const auto& host_of = rendezvous_->host_of_rank();
    const int root_host = host_of[root];
    const bool on_root_host = host_of[rank()] == root_host;
    if (on_root_host) {
      // Root -> its host's leader (and the rest of that host) first.
      const auto local = rendezvous_->ranks_on_host(root_host);
      const int local_root =
          static_cast<int>(std::find(local.begin(), local.end(), root) - local.begin());
      wait(host_->broadcast(tensor, local_root));
    }
    if (leader()) wait(leaders_->broadcast(tensor, root_host));
    if (!on_root_host) wait(host_->broadcast(tensor, 0));
  });
}

WorkPtr HierarchicalCommunicator::barrier() {
  return stages_->submit(describe_call("barrier", ++sequence_, at::Tensor()), [this] {
    wait(host_->barrier());
    if (leader()) wait(leaders_->barrier());
    wait(host_->barrier());
  });
}

WorkPtr HierarchicalCommunicator::allgather(at::Tensor input, at::Tensor output) {
  return all_->allgather(input, output);
}

WorkPtr HierarchicalCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  return all_->reduce_scatter(input, output, op);
}

WorkPtr HierarchicalCommunicator::send(at::Tensor tensor, int peer) {
  return all_->send(tensor, peer);
}

WorkPtr HierarchicalCommunicator::recv(at::Tensor tensor, int peer) {
  return all_->recv(tensor, peer);
}

}  // namespace loom::comm
