#include "loom/parallel/pipeline/pipeline_executor.h"

#include <torch/csrc/autograd/autograd.h>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

// A tensor's header: element type, dimension count, then the sizes.
constexpr int64_t kHeaderLength = 10;
constexpr int64_t kMaxDims = kHeaderLength - 2;

}  // namespace

std::vector<std::vector<models::Block>> stage_blocks(const std::vector<models::Block>& blocks,
                                                     const std::vector<int>& split) {
  std::vector<std::vector<models::Block>> out;
  size_t next = 0;
  for (int count : split) {
    if (count < 0 || next + static_cast<size_t>(count) > blocks.size()) {
      throw Error("pipeline: a split of " + std::to_string(blocks.size()) +
                  " blocks asks for more than there are");
    }
    out.emplace_back(blocks.begin() + static_cast<long>(next),
                     blocks.begin() + static_cast<long>(next + static_cast<size_t>(count)));
    next += static_cast<size_t>(count);
  }
  return out;
}

PipelineExecutor::PipelineExecutor(Schedule schedule,
                                   std::vector<std::vector<models::Block>> stage_blocks,
                                   const models::Loss& loss, GradSync& sync,
                                   comm::Communicator& comm, StepObserver& observer,
                                   PipelineExecutorOptions options)
    : schedule_(std::move(schedule)),
      stage_blocks_(std::move(stage_blocks)),
      loss_(loss),
      sync_(sync),
      comm_(comm),
      observer_(observer),
      options_(options),
      rank_(comm.rank()) {
  if (schedule_.ranks != comm.world()) {
    throw Error("pipeline: the schedule has " + std::to_string(schedule_.ranks) +
                " ranks but the job has " + std::to_string(comm.world()));
  }
  if (stage_blocks_.size() != static_cast<size_t>(schedule_.stages)) {
    throw Error("pipeline: " + std::to_string(stage_blocks_.size()) + " stages of blocks for a " +
                std::to_string(schedule_.stages) + "-stage schedule");
  }
  stage_weights_.resize(stage_blocks_.size());
  for (int s = 0; s < schedule_.stages; ++s) {
    if (rank_of(s) != rank_) continue;
    if (stage_blocks_[static_cast<size_t>(s)].empty()) {
      throw Error("pipeline: stage " + std::to_string(s) + " on rank " + std::to_string(rank_) +
                  " has no blocks");
    }
    for (const models::Block& block : stage_blocks_[static_cast<size_t>(s)]) {
      for (const auto& [name, p] : block.parameters) {
        if (p.requires_grad()) stage_weights_[static_cast<size_t>(s)].push_back(p);
      }
    }
  }
}

void PipelineExecutor::fail(const Action& a, const std::string& what) const {
  throw Error("pipeline stage " + std::to_string(a.stage) + " (rank " + std::to_string(rank_) +
              "), " + to_string(a) + ": " + what);
}

StepOutcome PipelineExecutor::run(const MicroBatchSource& micro_batch) {
  observer_.enter(Phase::kOptimizer);
  sync_.zero_grad();
  StepOutcome outcome;
  for (const Action& a : schedule_.actions[static_cast<size_t>(rank_)]) {
    switch (a.kind) {
      case ActionKind::kForward:
        forward(a, micro_batch, outcome);
        break;
      case ActionKind::kBackward:
        backward(a, /*input_only=*/false);
        break;
      case ActionKind::kBackwardInput:
        backward(a, /*input_only=*/true);
        break;
      case ActionKind::kBackwardWeight:
        backward_weights(a);
        break;
      case ActionKind::kSendForward:
        send(slot(a).output, a, a.stage + 1);
        break;
      case ActionKind::kSendBackward:
        send(slot(a).input_grad, a, a.stage - 1);
        slot(a).input_grad.reset();
        break;
      case ActionKind::kRecvForward:
        slot(a).input = receive(a, a.stage - 1).requires_grad_(true);
        break;
      case ActionKind::kRecvBackward:
        slot(a).output_grad = receive(a, a.stage + 1);
        break;
    }
  }
  observer_.enter(Phase::kCommExposed);
  for (auto& [work, tensor] : sends_) work->wait(comm_.options().timeout);
  sends_.clear();
  slots_.clear();
  share_outcome(outcome);
  sync_.finish();
  observer_.enter(Phase::kOther);
  return outcome;
}

void PipelineExecutor::forward(const Action& a, const MicroBatchSource& micro_batch,
                               StepOutcome& outcome) {
  Slot& s = slot(a);
  MicroBatch batch;
  if (a.stage == 0 || is_last(a.stage)) batch = micro_batch(a.microbatch);
  const at::Tensor& input = a.stage == 0 ? batch.input : s.input;
  if (!input.defined()) fail(a, "forward without its input");
  observer_.enter(Phase::kForward);
  at::Tensor y = input;
  {
    AutocastScope autocast(options_.bf16);
    for (const models::Block& block : stage_blocks_[static_cast<size_t>(a.stage)]) {
      y = block.forward(y);
    }
  }
  if (is_last(a.stage)) {
    const int64_t samples = batch.labels.size(0);
    if (samples > 0) {
      at::Tensor loss = loss_(y, batch.labels);
      const double value = loss.item<double>();
      observer_.loss_computed(value);
      outcome.loss_sum += value;
      outcome.samples += samples;
      s.output = loss / static_cast<double>(schedule_.microbatches);
    } else {
      s.output = y.sum() * 0.0;  // an empty micro-batch: no loss, but a graph to run backward on
    }
  } else {
    s.output = y;
    if (rank_of(a.stage + 1) == rank_) {  // the next stage is ours: hand over in memory
      slot({a.stage + 1, ActionKind::kForward, a.microbatch}).input =
          y.detach().requires_grad_(true);
    }
  }
  observer_.enter(Phase::kOther);
}

void PipelineExecutor::backward(const Action& a, bool input_only) {
  Slot& s = slot(a);
  if (!s.output.defined()) fail(a, "backward without its forward");
  if (!is_last(a.stage) && !s.output_grad.defined()) fail(a, "backward without its gradient");
  observer_.enter(Phase::kBackward);
  const std::vector<at::Tensor> grad = output_grad(a);
  const bool wants_input_grad = a.stage > 0;
  if (!input_only) {
    torch::autograd::backward({s.output}, grad);
    if (wants_input_grad) s.input_grad = s.input.grad();
    s.output.reset();
    s.output_grad.reset();
    s.input.reset();
  } else if (wants_input_grad) {
    s.input_grad =
        torch::autograd::grad({s.output}, {s.input}, grad, /*retain_graph=*/true)[0];
  }
  if (wants_input_grad && rank_of(a.stage - 1) == rank_) {  // the previous stage is ours
    slot({a.stage - 1, ActionKind::kForward, a.microbatch}).output_grad = s.input_grad;
  }
  observer_.enter(Phase::kOther);
}

void PipelineExecutor::backward_weights(const Action& a) {
  Slot& s = slot(a);
  if (!s.output.defined()) fail(a, "weight gradient without its forward");
  observer_.enter(Phase::kBackward);
  const std::vector<at::Tensor>& weights = stage_weights_[static_cast<size_t>(a.stage)];
  if (!weights.empty()) {
    torch::autograd::backward({s.output}, output_grad(a), /*retain_graph=*/false,
                              /*create_graph=*/false, weights);
  }
  s.output.reset();
  s.output_grad.reset();
  s.input.reset();
  observer_.enter(Phase::kOther);
}

std::vector<at::Tensor> PipelineExecutor::output_grad(const Action& a) {
  if (is_last(a.stage)) return {};
  return {slot(a).output_grad};
}

void PipelineExecutor::send(const at::Tensor& tensor, const Action& a, int peer_stage) {
  if (!tensor.defined()) fail(a, "nothing to send (its computation has not run)");
  if (tensor.dim() > kMaxDims) fail(a, "tensors of more than 8 dimensions cannot be sent");
  at::Tensor header = at::zeros({kHeaderLength}, at::kLong);
  auto* h = header.data_ptr<int64_t>();
  h[0] = static_cast<int64_t>(tensor.scalar_type());
  h[1] = tensor.dim();
  for (int64_t d = 0; d < tensor.dim(); ++d) h[2 + d] = tensor.size(d);
  at::Tensor data = tensor.detach().contiguous();
  const int peer = rank_of(peer_stage);
  sends_.emplace_back(comm_.send(header, peer), header);
  sends_.emplace_back(comm_.send(data, peer), data);
}

at::Tensor PipelineExecutor::receive(const Action& a, int peer_stage) {
  const int peer = rank_of(peer_stage);
  const auto wait = [&](const comm::WorkPtr& work) {
    try {
      work->wait(comm_.options().timeout);
    } catch (const Error& e) {
      fail(a, "waiting for stage " + std::to_string(peer_stage) + " on rank " +
                  std::to_string(peer) + ": " + e.what());
    }
  };
  observer_.enter(Phase::kCommExposed);
  at::Tensor header = at::empty({kHeaderLength}, at::kLong);
  wait(comm_.recv(header, peer));
  const auto* h = header.data_ptr<int64_t>();
  const bool known_type =
      h[0] >= 0 && h[0] < static_cast<int64_t>(at::ScalarType::NumOptions);
  if (!known_type || h[1] < 0 || h[1] > kMaxDims) {
    fail(a, "malformed tensor header from rank " + std::to_string(peer));
  }
  const std::vector<int64_t> sizes(h + 2, h + 2 + h[1]);
  at::Tensor data = at::empty(sizes, at::TensorOptions().dtype(static_cast<at::ScalarType>(h[0])));
  wait(comm_.recv(data, peer));
  observer_.enter(Phase::kOther);
  return data;
}

void PipelineExecutor::share_outcome(StepOutcome& outcome) {
  at::Tensor shared =
      at::tensor({outcome.loss_sum, static_cast<double>(outcome.samples)}, at::kDouble);
  comm_.broadcast(shared, rank_of(schedule_.stages - 1))->wait(comm_.options().timeout);
  outcome.loss_sum = shared[0].item<double>();
  outcome.samples = static_cast<int64_t>(shared[1].item<double>());
}

}  // namespace loom::parallel::pipeline
