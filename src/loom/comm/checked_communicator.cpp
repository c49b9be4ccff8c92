#include "loom/comm/checked_communicator.h"

#include "loom/core/error.h"

namespace loom::comm {
namespace {

enum Kind : std::int64_t { kAllreduce = 1, kBroadcast, kAllgather, kReduceScatter, kBarrier };
constexpr int kFields = 5;  // sequence, kind, numel, dtype, root

std::string describe(const std::int64_t* call) {
  static const char* names[] = {"?",         "allreduce",      "broadcast",
                                "allgather", "reduce_scatter", "barrier"};
  const auto kind = call[1] >= 1 && call[1] <= 5 ? call[1] : 0;
  std::string text = std::string(names[kind]) + " #" + std::to_string(call[0]);
  if (kind != kBarrier) {
    text += " (" + std::to_string(call[2]) + " x " +
            c10::toString(static_cast<c10::ScalarType>(call[3])) + ")";
  }
  if (kind == kBroadcast) text += " from root " + std::to_string(call[4]);
  return text;
}

}  // namespace

CheckedCommunicator::CheckedCommunicator(std::unique_ptr<Communicator> inner)
    : Communicator(inner->options()), inner_(std::move(inner)) {}

void CheckedCommunicator::check(int kind, const at::Tensor& tensor, int root) {
  const bool has = tensor.defined();
  auto mine =
      at::tensor({++sequence_, std::int64_t{kind}, has ? tensor.numel() : 0,
                  has ? static_cast<std::int64_t>(tensor.scalar_type()) : 0, std::int64_t{root}},
                 at::kLong);
  auto all = at::empty({world() * kFields}, at::kLong);
  inner_->allgather(mine, all)->wait(options().timeout);
  const auto* calls = all.data_ptr<std::int64_t>();
  const auto* own = calls + rank() * kFields;
  for (int r = 0; r < world(); ++r) {
    const auto* theirs = calls + r * kFields;
    if (!std::equal(own, own + kFields, theirs)) {
      throw CommError("calls out of step: rank " + std::to_string(rank()) + " called " +
                          describe(own) + " but rank " + std::to_string(r) + " called " +
                          describe(theirs) +
                          "; every rank must make the same calls in the same order",
                      {{"operation", describe(own)},
                       {"peer_operation", describe(theirs)},
                       {"peer_rank", std::to_string(r)},
                       {"problem", "calls_out_of_step"}});
    }
  }
}

WorkPtr CheckedCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  check(kAllreduce, tensor, 0);
  return inner_->allreduce(tensor, op);
}

WorkPtr CheckedCommunicator::broadcast(at::Tensor tensor, int root) {
  check(kBroadcast, tensor, root);
  return inner_->broadcast(tensor, root);
}

WorkPtr CheckedCommunicator::allgather(at::Tensor input, at::Tensor output) {
  check(kAllgather, input, 0);
  return inner_->allgather(input, output);
}

WorkPtr CheckedCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  check(kReduceScatter, input, 0);
  return inner_->reduce_scatter(input, output, op);
}

WorkPtr CheckedCommunicator::barrier() {
  check(kBarrier, at::Tensor(), 0);
  return inner_->barrier();
}

}  // namespace loom::comm
