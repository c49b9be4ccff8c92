#include "loom/parallel/pipeline/pipeline_executor.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>

#include <optional>
#include <set>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"
#include "loom/models/draw_key.h"

namespace loom::parallel::pipeline {

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
  // Where each of this rank's stages computes its weight gradients for the last time.
  const std::vector<Action>& actions = schedule_.actions[static_cast<size_t>(rank_)];
  final_gradient_.assign(actions.size(), false);
  std::map<int, size_t> last;
  for (size_t i = 0; i < actions.size(); ++i) {
    const ActionKind kind = actions[i].kind;
    if (kind == ActionKind::kBackward || kind == ActionKind::kBackwardWeight) {
      last[actions[i].stage] = i;
    }
  }
  for (const auto& [stage, i] : last) final_gradient_[i] = true;
  stage_weights_.resize(stage_blocks_.size());
  for (int s = 0; s < schedule_.stages; ++s) {
    if (rank_of(s) != rank_) continue;
    if (stage_blocks_[static_cast<size_t>(s)].empty()) {
      throw Error("pipeline: stage " + std::to_string(s) + " on rank " + std::to_string(rank_) +
                  " has no blocks");
    }
    for (const models::Block& block : stage_blocks_[static_cast<size_t>(s)]) {
      for (const auto* list : {&block.parameters, &block.tied}) {
        for (const auto& [name, p] : *list) {
          if (p.requires_grad()) stage_weights_[static_cast<size_t>(s)].push_back(p);
        }
      }
    }
  }
  // Every rank of the pipeline makes its executor at the same point (its layout's start), so
  // each opens its channels to its neighbours (NCCL's per-direction ones) with them.
  comm_.prepare_peers(neighbour_ranks());
}

void PipelineExecutor::fail(const Action& a, const std::string& what) const {
  throw Error("pipeline stage " + std::to_string(a.stage) + " (rank " + std::to_string(rank_) +
              "), " + to_string(a) + ": " + what);
}

StepOutcome PipelineExecutor::run(const MicroBatchSource& micro_batch) {
  ++step_;
  observer_.enter(Phase::kOptimizer);
  sync_.zero_grad();
  StepOutcome outcome;
  const std::vector<Action>& actions = schedule_.actions[static_cast<size_t>(rank_)];
  bool prepared = false;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    // Backward passes only accumulate, except each stage's last: its gradients are final, and
    // data-parallel replicas exchange them while the rest of the schedule runs.
    std::optional<GradSync::NoSync> accumulate_only;
    if (!final_gradient_[i]) {
      accumulate_only.emplace(sync_);
    } else if (!prepared) {
      observer_.enter(Phase::kCommExposed);
      sync_.prepare();
      prepared = true;
    }
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
        send(slot(a).output, a, a.stage + 1, Payload::kActivations);
        send(slot(a).targets, a, a.stage + 1, Payload::kLabels, slot(a).counted_targets);
        break;
      case ActionKind::kSendBackward:
        send(slot(a).input_grad, a, a.stage - 1, Payload::kGradient);
        slot(a).input_grad.reset();
        break;
      case ActionKind::kRecvForward: {
        Slot& s = slot(a);
        s.input = receive(a, a.stage - 1, Payload::kActivations);
        receive_targets(a, s);
        if (!is_empty(s)) s.input.requires_grad_(true);
        break;
      }
      case ActionKind::kRecvBackward:
        slot(a).output_grad = receive(a, a.stage + 1, Payload::kGradient);
        break;
    }
  }
  observer_.enter(Phase::kCommExposed);
  sends_.wait_all(comm_.options().timeout);
  slots_.clear();
  observer_.enter(Phase::kBubble);  // the last stage's rank may still be computing
  // Every rank, not only the last stage, learns the loss: the trainer of each stops alike at a
  // non-finite one.
  share_outcome(outcome);
  observer_.enter(Phase::kCommExposed);
  if (!prepared) sync_.prepare();  // no stage of this rank computed weight gradients
  sync_.finish();
  observer_.enter(Phase::kOther);
  return outcome;
}

void PipelineExecutor::forward(const Action& a, const MicroBatchSource& micro_batch,
                               StepOutcome& outcome) {
  Slot& s = slot(a);
  if (a.stage == 0) {
    MicroBatch batch = micro_batch(a.microbatch);
    s.input = batch.input;
    s.targets = batch.targets;
    s.counted_targets = batch.counted_targets;
  }
  if (!s.targets.defined()) fail(a, "forward without its input");
  if (is_empty(s)) {  // every sample of it was bad: nothing to compute, but the stages go on
    s.output = at::empty({0});
    hand_over(a, s.output);
    return;
  }
  if (!s.input.defined()) fail(a, "forward without its input");
  const int64_t samples = s.targets.size(0);
  observer_.enter(Phase::kForward);
  observer_.forward_begins();
  const models::DrawKeyScope keyed(observer_.draw_keys(a.microbatch));
  const at::Tensor y = run_stage(a, s.input);
  observer_.forward_ends(samples);
  if (is_last(a.stage)) {
    at::Tensor loss = loss_(y, s.targets);
    outcome.add_loss(loss);
    outcome.samples += samples;
    if (options_.count_targets) {
      add_targets(MicroBatch{at::Tensor(), s.targets, s.counted_targets}, outcome);
    }
    s.output = loss / static_cast<double>(schedule_.microbatches);
    if (loss_scale_ != 1.0) s.output = s.output * loss_scale_;  // fp16's loss scale
  } else {
    s.output = y;
    hand_over(a, y);
  }
  observer_.enter(Phase::kOther);
}

at::Tensor PipelineExecutor::run_stage(const Action& a, const at::Tensor& input) {
  AutocastScope autocast(options_.autocast);
  at::Tensor y = input;
  try {
    for (const models::Block& block : stage_blocks_[static_cast<size_t>(a.stage)]) {
      y = block.forward(y);
    }
  } catch (const c10::Error& e) {
    fail(a, "forward on an input of shape " + c10::str(input.sizes()) +
                (a.stage > 0 ? " from stage " + std::to_string(a.stage - 1) : std::string()) +
                " failed: " + e.what_without_backtrace());
  }
  return y;
}

void PipelineExecutor::hand_over(const Action& a, const at::Tensor& output) {
  if (is_last(a.stage) || rank_of(a.stage + 1) != rank_) return;
  Slot& next = slot({a.stage + 1, ActionKind::kForward, a.microbatch});
  next.targets = slot(a).targets;
  next.counted_targets = slot(a).counted_targets;
  next.input = is_empty(next) ? output : output.detach().requires_grad_(true);
}

void PipelineExecutor::backward(const Action& a, bool input_only) {
  Slot& s = slot(a);
  if (!s.output.defined()) fail(a, "backward without its forward");
  if (!is_last(a.stage) && !s.output_grad.defined()) fail(a, "backward without its gradient");
  const bool wants_input_grad = a.stage > 0;
  if (is_empty(s)) {
    if (wants_input_grad) s.input_grad = at::empty({0});
  } else {
    observer_.enter(Phase::kBackward);
    const std::vector<at::Tensor> grad = output_grad(a);
    if (!input_only) {
      torch::autograd::backward({s.output}, grad);
      if (wants_input_grad) s.input_grad = s.input.grad();
    } else if (wants_input_grad) {
      s.input_grad = torch::autograd::grad({s.output}, {s.input}, grad, /*retain_graph=*/true)[0];
    }
    observer_.enter(Phase::kOther);
  }
  if (!input_only) {
    s.output.reset();
    s.output_grad.reset();
    s.input.reset();
  }
  if (wants_input_grad && rank_of(a.stage - 1) == rank_) {  // the previous stage is ours
    slot({a.stage - 1, ActionKind::kForward, a.microbatch}).output_grad = s.input_grad;
  }
}

void PipelineExecutor::backward_weights(const Action& a) {
  Slot& s = slot(a);
  if (!s.output.defined()) fail(a, "weight gradient without its forward");
  const std::vector<at::Tensor>& weights = stage_weights_[static_cast<size_t>(a.stage)];
  if (!weights.empty() && !is_empty(s)) {
    observer_.enter(Phase::kBackward);
    torch::autograd::backward({s.output}, output_grad(a), /*retain_graph=*/false,
                              /*create_graph=*/false, weights);
    observer_.enter(Phase::kOther);
  }
  s.output.reset();
  s.output_grad.reset();
  s.input.reset();
}

std::vector<at::Tensor> PipelineExecutor::output_grad(const Action& a) {
  if (is_last(a.stage)) return {};
  return {slot(a).output_grad};
}

comm::MessageLabel PipelineExecutor::label(int stage, int microbatch, Payload payload) const {
  return {stage, microbatch, static_cast<int64_t>(payload), step_};
}

namespace {

// "the activations of stage 2 for micro-batch 5", with the step where `other` is of another.
// A label is (stage, micro-batch, payload, step).
std::string describe(const comm::MessageLabel& label, const comm::MessageLabel& other) {
  using Payload = PipelineExecutor::Payload;
  std::string what;
  switch (static_cast<Payload>(label[2])) {
    case Payload::kActivations:
      what = "the activations";
      break;
    case Payload::kLabels:
      what = "the labels";
      break;
    case Payload::kGradient:
      what = "the input gradient";
      break;
    default:
      return "an unlabelled message (kind " + std::to_string(label[2]) + ")";
  }
  what += " of stage " + std::to_string(label[0]) + " for micro-batch " + std::to_string(label[1]);
  if (label[3] != other[3]) what += " in step " + std::to_string(label[3]);
  return what;
}

}  // namespace

void PipelineExecutor::send(const at::Tensor& tensor, const Action& a, int peer_stage,
                            Payload payload, int64_t note) {
  if (!tensor.defined()) fail(a, "nothing to send (its computation has not run)");
  try {
    comm::send_tensor(comm_, tensor, rank_of(peer_stage), sends_,
                      {label(a.stage, a.microbatch, payload), note}, comm::Bytes::kOnTheirDevice);
  } catch (const Error& e) {
    fail(a, e.what());
  }
}

void PipelineExecutor::receive_targets(const Action& a, Slot& s) {
  int64_t counted = -1;
  s.targets = receive(a, a.stage - 1, Payload::kLabels, &counted);
  // The first stage's count, made on the host before its copy to the device; counted here only
  // where its feeder did not (on a GPU that waits for the device).
  if (options_.count_targets) {
    s.counted_targets = counted >= 0 ? counted : parallel::counted_targets(s.targets);
  }
}

std::vector<int> PipelineExecutor::neighbour_ranks() const {
  std::set<int> ranks;
  for (int stage = 0; stage < schedule_.stages; ++stage) {
    if (rank_of(stage) != rank_) continue;
    if (stage > 0) ranks.insert(rank_of(stage - 1));
    if (!is_last(stage)) ranks.insert(rank_of(stage + 1));
  }
  ranks.erase(rank_);
  return {ranks.begin(), ranks.end()};
}

at::Tensor PipelineExecutor::receive(const Action& a, int peer_stage, Payload payload,
                                     int64_t* note) {
  // Until the header arrives the peer is still computing (the bubble); after it, the bytes are
  // in transfer.
  observer_.enter(Phase::kBubble);
  const int peer = rank_of(peer_stage);
  const comm::MessageLabel expected = label(peer_stage, a.microbatch, payload);
  std::string misrouted;
  at::Tensor data;
  try {
    const auto check = [&](const comm::MessageHeader& header) {
      const comm::MessageLabel& got = header.label;
      if (got != expected) {
        misrouted = "expected " + describe(expected, got) + " from rank " + std::to_string(peer) +
                    ", but " + describe(got, expected) + " arrived";
        throw CommError(misrouted);
      }
      if (note) *note = header.note;
      observer_.enter(Phase::kCommExposed);
    };
    data = comm::recv_tensor(comm_, peer, check, options_.device);
  } catch (const Error& e) {
    if (!misrouted.empty()) fail(a, misrouted);
    fail(a, "waiting for stage " + std::to_string(peer_stage) + " on rank " + std::to_string(peer) +
                ": " + e.what());
  }
  observer_.enter(Phase::kOther);
  // Bytes a sender kept in host memory (a CPU tensor of its own) are moved here; an empty
  // micro-batch's markers are never computed with and stay where they arrived.
  if (data.numel() == 0 || data.device() == options_.device) return data;
  return data.to(options_.device);
}

void PipelineExecutor::share_outcome(StepOutcome& outcome) {
  const int last = rank_of(schedule_.stages - 1);
  // The counts, known to the last stage's host, go between hosts; the loss stays where it was
  // computed (on a GPU, read at the trainer's log lines), broadcast over the device's backend.
  at::Tensor counts = at::tensor({outcome.samples, outcome.targets, outcome.counted_targets});
  const auto on_device = at::TensorOptions().dtype(at::kDouble).device(options_.device);
  at::Tensor loss = rank_ == last && outcome.loss_sum.defined()
                        ? outcome.loss_sum.to(on_device).reshape({1})
                        : at::zeros({1}, on_device);
  const comm::WorkPtr counted = comm_.broadcast(counts, last);
  const comm::WorkPtr summed = comm_.broadcast(loss, last);
  counted->wait(comm_.options().timeout);
  summed->wait(comm_.options().timeout);
  const int64_t* values = counts.data_ptr<int64_t>();
  outcome.samples = values[0];
  outcome.targets = values[1];
  outcome.counted_targets = values[2];
  outcome.loss_sum = loss.reshape({});
}

void PipelineExecutor::forward_only(int64_t batches, const MicroBatchSource& batch,
                                    const OutputSink& output) {
  at::NoGradGuard no_grad;
  ++step_;
  for (int64_t b = 0; b < batches; ++b) {
    for (int stage = 0; stage < schedule_.stages; ++stage) {
      if (rank_of(stage) != rank_) continue;
      const Action a{stage, ActionKind::kForward, static_cast<int>(b)};
      Slot s;
      if (stage == 0) {
        MicroBatch mb = batch(b);
        s.input = mb.input;
        s.targets = mb.targets;
      } else if (rank_of(stage - 1) == rank_) {
        s = std::move(slots_[{stage, 0}]);
        slots_.erase({stage, 0});
      } else {
        s.input = receive(a, stage - 1, Payload::kActivations);
        s.targets = receive(a, stage - 1, Payload::kLabels);
      }
      const at::Tensor y = is_empty(s) ? at::empty({0}) : run_stage(a, s.input);
      if (is_last(stage)) {
        if (!is_empty(s)) output(y, s.targets);
      } else if (rank_of(stage + 1) == rank_) {
        Slot& next = slots_[{stage + 1, 0}];
        next.targets = s.targets;
        next.input = y;
      } else {
        send(y, a, stage + 1, Payload::kActivations);
        send(s.targets, a, stage + 1, Payload::kLabels);
      }
    }
    // Bounded memory: one batch in flight at a time.
    sends_.wait_all(comm_.options().timeout);
  }
}

}  // namespace loom::parallel::pipeline
