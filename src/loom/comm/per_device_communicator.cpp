#include "loom/comm/per_device_communicator.h"

#include "loom/core/error.h"

namespace loom::comm {

PerDeviceCommunicator::PerDeviceCommunicator(std::unique_ptr<Communicator> host,
                                             c10::DeviceType device_type,
                                             std::unique_ptr<Communicator> device)
    : Communicator(host->options()),
      host_(std::move(host)),
      device_type_(device_type),
      device_(std::move(device)) {}

PerDeviceCommunicator::~PerDeviceCommunicator() { device_.reset(); }

std::string PerDeviceCommunicator::backend() const {
  return "cpu:" + host_->backend() + "," + c10::DeviceTypeName(device_type_, true) + ":" +
         device_->backend();
}

Communicator& PerDeviceCommunicator::backend_for(const char* operation, const at::Tensor& first,
                                                 const at::Tensor& second) {
  const c10::DeviceType type = first.defined() ? first.device().type() : c10::kCPU;
  if (second.defined() && second.device().type() != type) {
    throw CommError(std::string(operation) + ": tensors on " + first.device().str() + " and " +
                        second.device().str() + "; a call moves tensors of one device type (rank " +
                        std::to_string(rank()) + " of " + std::to_string(world()) + ")",
                    {{"problem", "mixed_devices"}});
  }
  if (type == c10::kCPU) return *host_;
  if (type == device_type_) return *device_;
  throw CommError(std::string(operation) + ": a tensor on " + first.device().str() +
                      ", and this communicator moves " + c10::DeviceTypeName(device_type_, true) +
                      " and CPU tensors (rank " + std::to_string(rank()) + " of " +
                      std::to_string(world()) + ")",
                  {{"problem", "no_backend"}});
}

WorkPtr PerDeviceCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  return backend_for("allreduce", tensor).allreduce(std::move(tensor), op);
}

WorkPtr PerDeviceCommunicator::broadcast(at::Tensor tensor, int root) {
  return backend_for("broadcast", tensor).broadcast(std::move(tensor), root);
}

WorkPtr PerDeviceCommunicator::allgather(at::Tensor input, at::Tensor output) {
  return backend_for("allgather", input, output).allgather(std::move(input), std::move(output));
}

WorkPtr PerDeviceCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  return backend_for("reduce_scatter", input, output)
      .reduce_scatter(std::move(input), std::move(output), op);
}

void PerDeviceCommunicator::prepare_peers(const std::vector<int>& peers) {
  host_->prepare_peers(peers);
  device_->prepare_peers(peers);
}

WorkPtr PerDeviceCommunicator::send(at::Tensor tensor, int peer) {
  return backend_for("send", tensor).send(std::move(tensor), peer);
}

WorkPtr PerDeviceCommunicator::recv(at::Tensor tensor, int peer) {
  return backend_for("recv", tensor).recv(std::move(tensor), peer);
}

}  // namespace loom::comm
