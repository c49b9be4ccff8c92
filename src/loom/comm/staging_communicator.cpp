#include "loom/comm/staging_communicator.h"

#include <ATen/ATen.h>

#include <mutex>

namespace loom::comm {
namespace {

// The inner operation's Work, with the result's copy into the caller's tensor made once, by the
// first thread that sees the operation finished (a ZeRO bucket is released once its work reports
// completed(): its result must be in place by then). The staged copies stay alive with it.
class CopyBackWork : public Work {
 public:
  CopyBackWork(WorkPtr inner, at::Tensor result, at::Tensor target, at::Tensor keep_alive)
      : Work(inner->what()),
        inner_(std::move(inner)),
        result_(std::move(result)),
        target_(std::move(target)),
        keep_alive_(std::move(keep_alive)) {}

  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    copy_back();
  }

  bool completed() const override {
    if (!inner_->completed()) return false;
    // An operation that failed is complete without its copy; wait() rethrows its error.
    try {
      inner_->wait(std::chrono::milliseconds(0));
    } catch (...) {
      return true;
    }
    copy_back();
    return true;
  }

  std::chrono::steady_clock::time_point finished_at() const override {
    return inner_->finished_at();
  }

 private:
  void copy_back() const {
    std::call_once(copied_, [this] {
      if (result_.defined()) target_.copy_(result_);
      result_.reset();
      keep_alive_.reset();
    });
  }

  WorkPtr inner_;
  // Mutable: the copy is made by whichever of wait() and completed() comes first.
  mutable at::Tensor result_, target_, keep_alive_;
  mutable std::once_flag copied_;
};

}  // namespace

StagingCommunicator::StagingCommunicator(Communicator& inner, c10::Device through, Staged staged)
    : Communicator(inner.options()), inner_(inner), through_(through), staged_(staged) {}

std::string StagingCommunicator::backend() const {
  return inner_.backend() + " via " + (through_.is_cpu() ? std::string("host") : through_.str());
}

bool StagingCommunicator::stages(const at::Tensor& tensor) const {
  return tensor.defined() && (staged_ == Staged::kEveryTensor || tensor.device() != through_);
}

at::Tensor StagingCommunicator::staged(const at::Tensor& tensor, bool with_values) const {
  if (!stages(tensor)) return tensor;
  at::Tensor copy = at::empty(tensor.sizes(), tensor.options().device(through_));
  // A blocking copy: from a GPU to the host it waits for what the GPU's current stream queued
  // before this call.
  if (with_values) copy.copy_(tensor);
  return copy;
}

WorkPtr StagingCommunicator::copying_back(WorkPtr work, at::Tensor result, at::Tensor target,
                                          at::Tensor keep_alive) const {
  if (result.is_same(target)) {
    // Nothing comes back (a send, the root's broadcast), but a copy may still be in flight.
    if (!keep_alive.defined() || keep_alive.is_same(target)) return work;
    result = at::Tensor();
  }
  return std::make_shared<CopyBackWork>(std::move(work), std::move(result), std::move(target),
                                        std::move(keep_alive));
}

WorkPtr StagingCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  at::Tensor copy = staged(tensor, true);
  return copying_back(inner_.allreduce(copy, op), copy, tensor);
}

WorkPtr StagingCommunicator::broadcast(at::Tensor tensor, int root) {
  // Only the root's values travel; the others' copies are written over.
  at::Tensor copy = staged(tensor, rank() == root);
  if (rank() == root) return copying_back(inner_.broadcast(copy, root), tensor, tensor, copy);
  return copying_back(inner_.broadcast(copy, root), copy, tensor);
}

WorkPtr StagingCommunicator::allgather(at::Tensor input, at::Tensor output) {
  at::Tensor staged_input = staged(input, true);
  at::Tensor staged_output = staged(output, false);
  return copying_back(inner_.allgather(staged_input, staged_output), staged_output, output,
                      staged_input);
}

WorkPtr StagingCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  at::Tensor staged_input = staged(input, true);
  at::Tensor staged_output = staged(output, false);
  return copying_back(inner_.reduce_scatter(staged_input, staged_output, op), staged_output, output,
                      staged_input);
}

WorkPtr StagingCommunicator::send(at::Tensor tensor, int peer) {
  at::Tensor copy = staged(tensor, true);
  return copying_back(inner_.send(copy, peer), tensor, tensor, copy);
}

WorkPtr StagingCommunicator::recv(at::Tensor tensor, int peer) {
  at::Tensor copy = staged(tensor, false);
  return copying_back(inner_.recv(copy, peer), copy, tensor);
}

}  // namespace loom::comm
