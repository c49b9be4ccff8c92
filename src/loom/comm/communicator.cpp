#include "loom/comm/communicator.h"

#include "loom/core/error.h"

namespace loom::comm {

static std::string where(int rank, int world) {
  return " (rank " + std::to_string(rank) + " of " + std::to_string(world) + ")";
}

void check_tensor(const at::Tensor& tensor, const char* operation, int rank, int world) {
  if (!tensor.defined())
    throw CommError(std::string(operation) + ": undefined tensor" + where(rank, world));
  if (!tensor.device().is_cpu()) {
    throw CommError(std::string(operation) + ": tensor is on " + tensor.device().str() +
                    ", this communicator moves CPU tensors" + where(rank, world));
  }
  if (!tensor.is_contiguous()) {
    throw CommError(std::string(operation) + ": tensor is not contiguous" + where(rank, world));
  }
}

void check_peer(int peer, const char* operation, int rank, int world) {
  if (peer < 0 || peer >= world || peer == rank) {
    throw CommError(std::string(operation) + ": peer " + std::to_string(peer) +
                    " is not another rank of 0.." + std::to_string(world - 1) + where(rank, world));
  }
}

std::string describe_call(const char* operation, std::uint64_t sequence, const at::Tensor& tensor) {
  std::string text = std::string(operation) + " #" + std::to_string(sequence);
  if (tensor.defined()) {
    text +=
        " (" + std::to_string(tensor.numel()) + " x " + c10::toString(tensor.scalar_type()) + ")";
  }
  return text;
}

}  // namespace loom::comm
