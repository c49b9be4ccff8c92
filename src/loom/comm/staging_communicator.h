// Collectives through copies on another device: each tensor of a call that is not on the
// communicator's `through` device is copied there, the inner communicator moves the copy, and the
// result is copied back. Through the CPU, it moves GPU tensors over a host backend (shm, tcp or
// both): what lets ranks that share one GPU train together (NCCL drives one GPU per rank), and
// the fallback where NCCL cannot be loaded. The copies to the host wait for the device work
// queued before the call (such a copy synchronises with the current stream), so the caller need
// not. Through a GPU, the tests run their CPU-tensor checks over a GPU's backend.
//
// A call's result is in its tensor once its Work reports completion: completed() and wait() copy
// it back the first time they see the inner operation finished, on the calling thread. Calls are
// made from one thread at a time, as for every communicator; the inner communicator must outlive
// this one.
#pragma once

#include "loom/comm/communicator.h"

namespace loom::comm {

// Which tensors a call stages: those on other devices than `through` (a run's), or every tensor
// (the tests of the staging itself, on hosts without a GPU: CPU tensors then take the path a
// GPU's take).
enum class Staged { kOtherDevices, kEveryTensor };

class StagingCommunicator : public Communicator {
 public:
  StagingCommunicator(Communicator& inner, c10::Device through = c10::kCPU,
                      Staged staged = Staged::kOtherDevices);

  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  // "shm via host" for the shm backend underneath, through the CPU.
  std::string backend() const override;

  WorkPtr allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr broadcast(at::Tensor tensor, int root) override;
  WorkPtr allgather(at::Tensor input, at::Tensor output) override;
  WorkPtr reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) override;
  WorkPtr send(at::Tensor tensor, int peer) override;
  WorkPtr recv(at::Tensor tensor, int peer) override;
  WorkPtr barrier() override { return inner_.barrier(); }

 private:
  bool stages(const at::Tensor& tensor) const;
  // The tensor the inner communicator moves in `tensor`'s place: itself when it is not staged,
  // else a contiguous copy on `through` (of its values when `with_values`, else uninitialised).
  at::Tensor staged(const at::Tensor& tensor, bool with_values) const;
  // `work`, with `result` copied back into `target` on completion (nothing when they are the
  // same tensor), keeping `keep_alive` (a copy the operation reads) alive until then.
  WorkPtr copying_back(WorkPtr work, at::Tensor result, at::Tensor target,
                       at::Tensor keep_alive = {}) const;

  Communicator& inner_;
  c10::Device through_;
  Staged staged_;
};

}  // namespace loom::comm
