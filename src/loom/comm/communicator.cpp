#include "loom/comm/communicator.h"

#include "loom/comm/shape_checks.h"

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

void check_allgather(const at::Tensor& input, const at::Tensor& output, int rank, int world) {
  check_tensor(input, "allgather", rank, world);
  check_tensor(output, "allgather", rank, world);
  if (output.numel() != input.numel() * world || output.scalar_type() != input.scalar_type()) {
    throw CommError("allgather: output is " + std::to_string(output.numel()) + " x " +
                    c10::toString(output.scalar_type()) + ", expected " +
                    std::to_string(input.numel() * world) + " x " +
                    c10::toString(input.scalar_type()));
  }
}

void check_reduce_scatter(const at::Tensor& input, const at::Tensor& output, int rank, int world) {
  check_tensor(input, "reduce_scatter", rank, world);
  check_tensor(output, "reduce_scatter", rank, world);
  if (input.numel() != output.numel() * world || output.scalar_type() != input.scalar_type()) {
    throw CommError("reduce_scatter: input has " + std::to_string(input.numel()) +
                    " elements, expected world x output = " +
                    std::to_string(output.numel() * world));
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
