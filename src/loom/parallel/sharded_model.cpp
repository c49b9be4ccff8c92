#include "loom/parallel/sharded_model.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "loom/core/autocast_scope.h"
#include "loom/core/error.h"

namespace loom::parallel {

// Runs once a parameter's gradient of this backward is complete (its accumulator ran).
class ShardedModel::LandedHook : public torch::autograd::FunctionPostHook {
 public:
  LandedHook(ShardedModel* owner, std::size_t bucket) : owner_(owner), bucket_(bucket) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->gradient_landed(bucket_);
    return outputs;
  }

 private:
  ShardedModel* owner_;
  std::size_t bucket_;
};

ShardedModel::ShardedModel(models::Model& inner, ZeroPartition& partition,
                           comm::Communicator& group, KeepAfterForward keep)
    : inner_(inner), partition_(partition), group_(group), keep_(keep), blocks_(inner.blocks()) {
  if (!partition.shards_parameters()) {
    throw Error("ShardedModel: the partition is ZeRO-" + std::to_string(partition.stage()) +
                ", not ZeRO-3");
  }
  for (const models::Block& block : blocks_) {
    std::vector<std::size_t> buckets;
    for (const auto* named : {&block.parameters, &block.tied}) {
      for (const auto& [name, tensor] : *named) {
        const int p = partition.index_of(name);
        if (p >= 0) buckets.push_back(partition.bucket_of(p));
      }
    }
    std::sort(buckets.begin(), buckets.end());
    buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
    needs_.push_back(std::move(buckets));
  }
  landed_.assign(partition.bucket_count(), 0);
  // The trained parameters' gradients tell when their buckets may go (frozen ones have none).
  const NamedTensors& parameters = partition.parameters();
  for (std::size_t p = 0; p < partition.trained_parameter_count(); ++p) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[p].second);
    if (!accumulator) {
      throw Error("ZeRO-3: parameter '" + parameters[p].first + "' is not a leaf tensor");
    }
    hook_keys_.push_back(accumulator->add_post_hook(
        std::make_unique<LandedHook>(this, partition.bucket_of(static_cast<int>(p)))));
    accumulators_.push_back(std::move(accumulator));
  }
}

ShardedModel::~ShardedModel() {
  for (std::size_t i = 0; i < accumulators_.size(); ++i) {
    std::static_pointer_cast<torch::autograd::Node>(accumulators_[i])->del_post_hook(hook_keys_[i]);
  }
}

void ShardedModel::gather(std::size_t b) {
  for (std::size_t bucket : needs_[b]) partition_.gather_bucket(bucket, group_);
}

void ShardedModel::wait_whole(std::size_t b, Phase running) {
  gather(b);
  const bool waits = std::any_of(needs_[b].begin(), needs_[b].end(),
                                 [&](std::size_t bucket) { return !partition_.whole(bucket); });
  if (!waits) return;
  const bool charged = phases_ && (running == Phase::kBackward || at::GradMode::is_enabled());
  if (charged) phases_->enter(Phase::kCommExposed);
  for (std::size_t bucket : needs_[b]) partition_.wait_whole(bucket, group_);
  if (charged) phases_->enter(running);
}

void ShardedModel::before_block(std::size_t b) {
  gather(b);
  if (b + 1 < blocks_.size()) gather(b + 1);  // overlaps this block's compute
  wait_whole(b, Phase::kForward);
}

void ShardedModel::after_block(std::size_t b, const at::Tensor& output) {
  after_block(b, std::vector<at::Tensor>{output});
}

void ShardedModel::after_block(std::size_t b, const std::vector<at::Tensor>& outputs) {
  const bool last = b + 1 == blocks_.size();
  bool training = false;
  if (at::GradMode::is_enabled()) {
    for (const at::Tensor& output : outputs) {
      if (!output.defined() || !output.requires_grad()) continue;
      // The first of them that backward reaches gathers the block; the others find it whole.
      output.register_hook([this, b](const at::Tensor&) { backward_reaches(b); });
      training = true;
    }
  }
  const bool keep =
      training && (keep_ == KeepAfterForward::kAll || (keep_ == KeepAfterForward::kLast && last));
  if (!keep) release(b);
}

void ShardedModel::release(std::size_t b) {
  if (held_) return;
  const bool last = b + 1 == blocks_.size();
  for (std::size_t bucket : needs_[b]) {
    // The next block's (being gathered) stay.
    if (last ||
        std::find(needs_[b + 1].begin(), needs_[b + 1].end(), bucket) == needs_[b + 1].end()) {
      partition_.release_bucket(bucket);
    }
  }
}

void ShardedModel::hold_whole() {
  for (std::size_t b = 0; b < partition_.bucket_count(); ++b) partition_.gather_bucket(b, group_);
  for (std::size_t b = 0; b < partition_.bucket_count(); ++b) partition_.wait_whole(b, group_);
  held_ = true;
}

void ShardedModel::let_go() {
  held_ = false;
  for (std::size_t b = 0; b < partition_.bucket_count(); ++b) partition_.release_bucket(b);
}

at::Tensor ShardedModel::run_block(std::size_t b, const at::Tensor& input) {
  before_block(b);
  at::Tensor output = blocks_[b].forward(input);
  after_block(b, output);
  return output;
}

void ShardedModel::check_chain(const at::Tensor& probe) {
  // Every block gathered at once, as the model was before it was sharded.
  const bool was_held = held_;
  if (!was_held) hold_whole();
  std::string failure;
  try {
    // Not a step's work: kept out of the FLOP counter and traces that watch this thread, and
    // out of autocast, whose cache would keep the weights' bf16 copies made here without
    // gradients for the step's forward to reuse.
    at::DisableRecordFunctionGuard unwatched;
    const AutocastScope no_autocast{AutocastState{}};
    models::check_blocks(inner_, probe);
  } catch (const ConfigError& e) {
    failure = e.what();
  }
  inner_.train(training_);
  if (!was_held) let_go();
  if (!failure.empty()) {
    throw ConfigError("config key 'parallel.zero': ZeRO-3 runs the model a block at a time, " +
                      std::string("which needs its forward to be its chain of blocks: ") + failure);
  }
}

at::Tensor ShardedModel::forward(const at::Tensor& input) {
  if (!chain_checked_) {
    check_chain(input);
    chain_checked_ = true;
  }
  at::Tensor x = input;
  for (std::size_t b = 0; b < blocks_.size(); ++b) x = run_block(b, x);
  return x;
}

std::vector<models::Block> ShardedModel::blocks() {
  std::vector<models::Block> out = blocks_;
  for (std::size_t b = 0; b < out.size(); ++b) {
    out[b].forward = [this, b](const at::Tensor& input) { return run_block(b, input); };
  }
  return out;
}

void ShardedModel::backward_reaches(std::size_t b) {
  if (!backward_running_) {
    // Whatever is still whole when this backward ends (a parameter that got no gradient) is
    // freed then. Counts start afresh (a backward that failed left its own).
    backward_running_ = true;
    std::fill(landed_.begin(), landed_.end(), 0);
    torch::autograd::Engine::get_default_engine().queue_callback([this] { end_backward(); });
  }
  if (b + 1 < blocks_.size()) release_frozen_after_backward(b + 1);
  gather(b);
  if (b > 0) gather(b - 1);  // the block whose backward comes next
  wait_whole(b, Phase::kBackward);
}

void ShardedModel::release_frozen_after_backward(std::size_t done) {
  // Block `done` has given the gradient of its input (this hook's tensor), so nothing of its
  // backward reads its frozen parameters any more; those that train wait for their gradients.
  const auto needed_by = [&](std::size_t b, std::size_t bucket) {
    return std::find(needs_[b].begin(), needs_[b].end(), bucket) != needs_[b].end();
  };
  if (held_) return;
  for (std::size_t bucket : needs_[done]) {
    if (partition_.trains(bucket)) continue;
    if (needed_by(done - 1, bucket) || (done >= 2 && needed_by(done - 2, bucket))) continue;
    partition_.release_bucket(bucket);
  }
}

void ShardedModel::gradient_landed(std::size_t bucket) {
  const auto& members = partition_.parameters_in(bucket);
  if (++landed_[bucket] < static_cast<int>(members.size())) return;
  // Nothing later in this backward reads them: every use has given its gradient.
  landed_[bucket] = 0;
  partition_.release_bucket(bucket);
}

void ShardedModel::end_backward() {
  backward_running_ = false;
  std::fill(landed_.begin(), landed_.end(), 0);
  if (held_) return;
  for (std::size_t bucket = 0; bucket < partition_.bucket_count(); ++bucket) {
    // A gather still under way (started for a block whose backward never came) is waited for:
    // the optimizer is about to step the shard it sends from.
    if (!partition_.whole(bucket)) partition_.wait_if_gathering(bucket, group_);
    partition_.release_bucket(bucket);
  }
}

}  // namespace loom::parallel
