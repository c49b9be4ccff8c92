#include "loom/train/checkpoint_agreement.h"

#include <ATen/ATen.h>

#include <string>

#include "loom/core/error.h"

namespace loom::train {

void agree_on_checkpoint(comm::Communicator& comm, int64_t step, bool failed_here) {
  // One sum of failures: it completes on a rank only once every rank, the writer among them,
  // has finished its part.
  at::Tensor failed = at::full({1}, failed_here ? 1.0f : 0.0f);
  comm.allreduce(failed, comm::ReduceOp::kSum)->wait(comm.options().timeout);
  const auto failures = static_cast<int>(failed.item<float>() + 0.5f);
  if (failures == 0 || failed_here) return;
  throw Error("checkpoint of step " + std::to_string(step) + ": " + std::to_string(failures) +
              " rank(s) could not commit their part (their error says why; rank " +
              std::to_string(comm.rank()) + " of " + std::to_string(comm.world()) +
              "); the previous checkpoint stands");
}

}  // namespace loom::train
