#include "loom/parallel/data_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "loom/comm/broadcast_coalesced.h"
#include "loom/parallel/same_model_check.h"
#include "loom/core/error.h"

namespace loom::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A tensor with `like`'s shape and strides that shares `flat`'s memory from `offset` on. Not a
// view in autograd's sense, so optimizers may detach and zero it in place like any gradient.
at::Tensor alias_into(const at::Tensor& flat, std::int64_t offset, const at::Tensor& like) {
  at::Tensor alias = at::empty({0}, flat.options());
  const auto strides = like.is_non_overlapping_and_dense()
                           ? like.strides().vec()
                           : at::empty(like.sizes()).strides().vec();
  alias.set_(flat.storage(), flat.storage_offset() + offset, like.sizes(), strides);
  return alias;
}

}  // namespace

struct DataParallel::Bucket {
  std::vector<int> parameters;
  at::Tensor flat;  // the gradients of `parameters`, back to back
  at::Tensor wire;  // flat in the compression type, when compressing
  int pending = 0;  // gradients still to come this step
  comm::WorkPtr work;
};

const at::Tensor& DataParallel::wire_of(const Bucket& bucket) {
  return bucket.wire.defined() ? bucket.wire : bucket.flat;
}

// Runs after a parameter's gradient has been accumulated into its .grad (the bucket slice).
class DataParallel::ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DataParallel* owner, int parameter) : owner_(owner), parameter_(parameter) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->on_gradient_ready(parameter_);
    return outputs;
  }

 private:
  DataParallel* owner_;
  int parameter_;
};

DataParallel::DataParallel(NamedTensors parameters, NamedTensors buffers, comm::Communicator& comm,
                           DataParallelOptions options, std::unique_ptr<BucketExchange> exchange)
    : buffers_(std::move(buffers)),
      comm_(comm),
      options_(options),
      exchange_(exchange ? std::move(exchange) : std::make_unique<AllReduceExchange>(comm)) {
  if (options_.compression && *options_.compression != at::kBFloat16 &&
      *options_.compression != at::kHalf) {
    throw ConfigError("parallel.compression: only bf16 and fp16 buckets are supported");
  }
  // Every parameter starts as rank 0's, frozen ones too; only trainable ones get buckets.
  broadcast_initial_state(parameters);
  if (!options_.owners.empty()) {
    if (options_.owners.size() != parameters.size()) {
      throw Error("DataParallel: " + std::to_string(options_.owners.size()) + " owners for " +
                  std::to_string(parameters.size()) + " parameters");
    }
    owned_by_.resize(static_cast<size_t>(comm_.world()));
    for (size_t i = 0; i < parameters.size(); ++i) {
      owned_by_.at(static_cast<size_t>(options_.owners[i])).push_back(parameters[i].second);
    }
  }
  for (auto& named : parameters) {
    if (named.second.requires_grad()) parameters_.push_back(std::move(named));
  }

  // Until the first step shows the real order, expect gradients in reverse registration order.
  std::vector<int> order(parameters_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(order.size() - 1 - i);
  build_buckets(order);

  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i].second);
    if (!accumulator) {
      throw Error("DataParallel: parameter '" + parameters_[i].first + "' is not a leaf tensor");
    }
    hook_keys_.push_back(
        accumulator->add_post_hook(std::make_unique<ReadyHook>(this, static_cast<int>(i))));
    accumulators_.push_back(std::move(accumulator));
  }
  ready_.assign(parameters_.size(), 0);
}

void DataParallel::step(double lr, const std::function<void()>& local_step) {
  local_step();
  if (owned_by_.empty()) return;
  // Every rank's updated parameters, from that rank, in rank order on every rank.
  for (size_t rank = 0; rank < owned_by_.size(); ++rank) {
    if (!owned_by_[rank].empty()) {
      comm::broadcast_coalesced(owned_by_[rank], comm_, static_cast<int>(rank));
    }
  }
}

std::string DataParallel::describe() const {
  return exchange_->describe() +
         (owned_by_.empty() ? "" : ", optimizer state sharded (ZeRO-1), parameters broadcast");
}

DataParallel::~DataParallel() {
  for (std::size_t i = 0; i < accumulators_.size(); ++i) {
    std::static_pointer_cast<torch::autograd::Node>(accumulators_[i])->del_post_hook(hook_keys_[i]);
  }
  // Let running all-reduces finish before their buckets go away.
  for (auto& bucket : buckets_) {
    if (bucket.work) {
      try {
        bucket.work->wait(comm_.options().timeout);
      } catch (const std::exception&) {
        // Already reported by finish(), or the run is being torn down by another error.
      }
    }
  }
}

void DataParallel::broadcast_initial_state(const NamedTensors& parameters) {
  NamedTensors all = parameters;
  all.insert(all.end(), buffers_.begin(), buffers_.end());
  check_same_tensors(all, comm_, "DataParallel");
  std::vector<at::Tensor> tensors;
  for (auto& [name, t] : parameters) tensors.push_back(t);
  for (auto& [name, t] : buffers_) tensors.push_back(t);
  comm::broadcast_coalesced(tensors, comm_);
}

void DataParallel::sync_buffers() {
  std::vector<at::Tensor> tensors;
  for (auto& [name, t] : buffers_) {
    if (t.is_floating_point()) tensors.push_back(t);  // counters (num_batches_tracked) agree anyway
  }
  if (!tensors.empty()) comm::broadcast_coalesced(tensors, comm_);
}

void DataParallel::set_bucket_limits(const BucketLimits& limits) {
  options_.buckets = limits;
  limits_changed_ = true;
}

void DataParallel::build_buckets(const std::vector<int>& order) {
  bucket_order_ = order;
  std::vector<GradientInfo> gradients;
  for (auto& [name, t] : parameters_) gradients.push_back({t.numel(), t.scalar_type()});
  const auto plan = plan_buckets(gradients, order, options_.buckets);

  at::NoGradGuard no_grad;
  std::vector<Bucket> buckets(plan.size());
  bucket_of_.assign(parameters_.size(), -1);
  offset_in_bucket_.assign(parameters_.size(), 0);
  aliases_.resize(parameters_.size());
  for (std::size_t b = 0; b < plan.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.parameters = plan[b];
    std::int64_t total = 0;
    for (int p : plan[b]) total += parameters_[p].second.numel();
    const auto type = parameters_[plan[b][0]].second.scalar_type();
    bucket.flat = at::zeros({total}, at::TensorOptions().dtype(type));
    if (options_.compression)
      bucket.wire = at::empty({total}, at::TensorOptions().dtype(*options_.compression));
    std::int64_t offset = 0;
    for (int p : plan[b]) {
      at::Tensor& param = parameters_[p].second;
      at::Tensor alias = alias_into(bucket.flat, offset, param);
      if (param.grad().defined()) {  // keep what was accumulated
        alias.copy_(param.grad());
        param.mutable_grad() = alias;
      }
      aliases_[p] = alias;
      bucket_of_[p] = static_cast<int>(b);
      offset_in_bucket_[p] = offset;
      offset += param.numel();
    }
  }
  buckets_ = std::move(buckets);
  std::vector<at::Tensor> exchanged;
  for (const Bucket& bucket : buckets_) exchanged.push_back(wire_of(bucket));
  exchange_->buckets_changed(exchanged);
}

std::vector<int> DataParallel::shared_ready_order() {
  // Rank 0's observed order, completed with parameters it never saw, is everyone's order.
  std::vector<char> seen(parameters_.size(), 0);
  std::vector<std::int64_t> order;
  for (int p : ready_order_) {
    if (!seen[p]) order.push_back(p), seen[p] = 1;
  }
  for (int p = static_cast<int>(parameters_.size()) - 1; p >= 0; --p) {
    if (!seen[p]) order.push_back(p);
  }
  at::Tensor shared = at::tensor(order, at::kLong);
  comm_.broadcast(shared, 0)->wait(comm_.options().timeout);
  const auto* values = shared.data_ptr<std::int64_t>();
  return std::vector<int>(values, values + shared.numel());
}

void DataParallel::zero_grad() {
  // Leave .grad empty: autograd then hands over its freshly computed gradient instead of adding
  // it to a zeroed one, and the hook copies it into the bucket (two passes over memory instead
  // of a memset and a read-add-write). Parameters left without a gradient are zeroed in finish().
  for (auto& [name, param] : parameters_) param.mutable_grad().reset();
}

void DataParallel::prepare() {
  if (options_.broadcast_buffers) sync_buffers();
  if (!rebuilt_ && stats_.buckets > 0) {  // after the first synchronised step
    build_buckets(shared_ready_order());
    rebuilt_ = true;
  } else if (limits_changed_) {
    build_buckets(bucket_order_);
  }
  limits_changed_ = false;
  std::fill(ready_.begin(), ready_.end(), 0);
  gradients_seen_ = 0;
  next_bucket_ = 0;
  started_ = false;
  finish_queued_ = false;
  for (auto& bucket : buckets_) {
    bucket.pending = static_cast<int>(bucket.parameters.size());
    bucket.work.reset();
  }
}

void DataParallel::on_gradient_ready(int parameter) {
  if (!rebuilt_ && ready_order_.size() < parameters_.size()) ready_order_.push_back(parameter);
  // After zero_grad() autograd stored a new tensor: move it into the bucket, so that later
  // micro-batches accumulate there and the optimizer reads the reduced values.
  at::Tensor& param = parameters_[parameter].second;
  const at::Tensor& alias = aliases_[parameter];
  if (!param.grad().is_same(alias)) {
    alias.copy_(param.grad());
    param.mutable_grad() = alias;
  }
  if (!sync_enabled() || ready_[parameter]) return;
  if (options_.finish_in_backward && !finish_queued_) {
    // Runs on this thread once the whole backward is done, before backward() returns.
    finish_queued_ = true;
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finish(); });
  }
  ready_[parameter] = 1;
  ++gradients_seen_;
  const int index = bucket_of_[parameter];
  Bucket& bucket = buckets_[index];
  // The exchange may move this much of the bucket before the rest is there (parameter servers
  // push each part once it is complete). Not when compressing: the wire copy is made whole.
  if (!bucket.wire.defined() &&
      exchange_->filled(index, offset_in_bucket_[parameter], param.numel())) {
    mark_started();
  }
  if (--bucket.pending == 0) start_ready_buckets();
}

void DataParallel::mark_started() {
  if (started_) return;
  started_ = true;
  first_start_ = Clock::now();
}

void DataParallel::start_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    start(next_bucket_++);
  }
}

void DataParallel::start(std::size_t index) {
  Bucket& bucket = buckets_[index];
  mark_started();
  if (bucket.wire.defined()) bucket.wire.copy_(bucket.flat);
  bucket.work = exchange_->start(index, wire_of(bucket));
}

void DataParallel::finish() {
  if (!sync_enabled()) return;
  const auto finish_start = Clock::now();
  if (next_bucket_ < buckets_.size()) {
    // Some gradients never came. With no backward at all (every sample of the batch was bad)
    // the zero gradients still take part, so that the ranks' collectives stay in step.
    if (gradients_seen_ > 0 && !options_.find_unused_parameters) {
      std::string missing;
      int count = 0;
      for (std::size_t p = 0; p < parameters_.size(); ++p) {
        if (ready_[p]) continue;
        if (count++ < 8) missing += (missing.empty() ? "" : ", ") + parameters_[p].first;
      }
      if (count > 8) missing += ", ... (" + std::to_string(count) + " in all)";
      throw Error(
          "DataParallel: parameters got no gradient in this backward: " + missing + " (rank " +
          std::to_string(comm_.rank()) + " of " + std::to_string(comm_.world()) +
          "); if the model skips them on purpose, set parallel.find_unused_parameters: true");
    }
    for (std::size_t p = 0; p < parameters_.size(); ++p) {
      if (!ready_[p]) zero_gradient(static_cast<int>(p));
    }
    for (auto& bucket : buckets_) bucket.pending = 0;
    start_ready_buckets();
  }
  Clock::time_point last_done = first_start_;
  std::size_t bytes = 0;
  if (phases_) phases_->enter(Phase::kCommExposed);
  for (auto& bucket : buckets_) {
    bucket.work->wait(comm_.options().timeout);
    if (bucket.wire.defined()) bucket.flat.copy_(bucket.wire);
    last_done = std::max(last_done, bucket.work->finished_at());
    bytes += wire_of(bucket).nbytes();
  }
  exchange_->step_finished(stats_);
  stats_.buckets = static_cast<int>(buckets_.size());
  stats_.bytes = bytes;
  stats_.comm_seconds = seconds_between(first_start_, last_done);
  stats_.exposed_seconds = seconds_between(finish_start, Clock::now());
  if (phases_) phases_->enter(Phase::kOther);  // the loop says what comes next
}

void DataParallel::zero_gradient(int parameter) {
  // Zero unless this step's earlier micro-batches (under no_sync) accumulated into it.
  at::Tensor& param = parameters_[parameter].second;
  if (!param.grad().is_same(aliases_[parameter])) {
    aliases_[parameter].zero_();
    param.mutable_grad() = aliases_[parameter];
  }
}

std::vector<std::vector<std::string>> DataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> names;
  for (const auto& bucket : buckets_) {
    names.emplace_back();
    for (int p : bucket.parameters) names.back().push_back(parameters_[p].first);
  }
  return names;
}

}  // namespace loom::parallel
