#include "loom/parallel/data_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "loom/comm/broadcast_coalesced.h"
#include "loom/core/error.h"
#include "loom/parallel/same_model_check.h"

namespace loom::parallel {

DataParallelOptions data_parallel_options(const ParallelConfig& config) {
  DataParallelOptions options;
  options.buckets = bucket_limits(config.first_bucket_mb, config.bucket_cap_mb);
  options.find_unused_parameters = config.find_unused_parameters;
  options.broadcast_buffers = config.broadcast_buffers;
  if (config.compression == "bf16") options.compression = at::kBFloat16;
  if (config.compression == "fp16") options.compression = at::kHalf;
  return options;
}
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct DataParallel::Bucket {
  std::vector<int> parameters;
  std::int64_t numel = 0;
  at::Tensor flat;  // the gradients of `parameters`, back to back (ZeRO-2: while reducing)
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
    : buffers_(std::move(buffers)), comm_(comm), options_(options), exchange_(std::move(exchange)) {
  if (!exchange_) {
    exchange_ = options_.zero ? std::unique_ptr<BucketExchange>(
                                    std::make_unique<ReduceScatterExchange>(comm, *options_.zero))
                              : std::make_unique<AllReduceExchange>(comm);
  } else if (options_.zero) {
    throw ConfigError(
        "config key 'parallel.zero': ZeRO reduce-scatters among the workers; it "
        "does not combine with parameter servers");
  }
  if (options_.zero && options_.compression) {
    throw ConfigError(
        "config key 'parallel.compression': ZeRO reduce-scatters gradients as they "
        "are; it does not combine with compressed buckets");
  }
  if (options_.compression && *options_.compression != at::kBFloat16 &&
      *options_.compression != at::kHalf) {
    throw ConfigError("parallel.compression: only bf16 and fp16 buckets are supported");
  }
  // Every parameter starts as rank 0's, frozen ones too; only trainable ones get buckets.
  broadcast_initial_state(parameters);
  for (auto& named : parameters) {
    if (named.second.requires_grad()) parameters_.push_back(std::move(named));
  }
  if (options_.zero && options_.zero->trained_parameter_count() != parameters_.size()) {
    throw Error("DataParallel: the ZeRO partition holds " +
                std::to_string(options_.zero->trained_parameter_count()) + " parameters, " +
                std::to_string(parameters_.size()) + " train");
  }
  rebuilt_ = options_.zero != nullptr;  // the partition's buckets stay

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
  // ZeRO-3 gathers each block's parameters when it runs next.
  if (options_.zero && !options_.zero->shards_parameters()) options_.zero->gather_parameters(comm_);
}

std::string DataParallel::describe() const { return exchange_->describe(); }

void DataParallel::end_training() {
  exchange_->end_training();
  if (options_.zero && options_.zero->shards_parameters()) options_.zero->gather_parameters(comm_);
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
  const auto plan = options_.zero ? options_.zero->bucket_plan()
                                  : plan_buckets(gradients, order, options_.buckets);

  at::NoGradGuard no_grad;
  std::vector<Bucket> buckets(plan.size());
  bucket_of_.assign(parameters_.size(), -1);
  offset_in_bucket_.assign(parameters_.size(), 0);
  aliases_.resize(parameters_.size());
  for (std::size_t b = 0; b < plan.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.parameters = plan[b];
    std::int64_t offset = 0;
    for (int p : plan[b]) {
      bucket_of_[p] = static_cast<int>(b);
      offset_in_bucket_[p] = options_.zero ? options_.zero->offset_of(p) : offset;
      offset += parameters_[p].second.numel();
    }
    // ZeRO pads a bucket to a multiple of the ranks.
    bucket.numel = options_.zero ? options_.zero->bucket_numel(b) : offset;
    if (options_.compression) {
      bucket.wire = at::empty(
          {bucket.numel}, parameters_[plan[b][0]].second.options().dtype(*options_.compression));
    }
  }
  buckets_ = std::move(buckets);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (!options_.zero || options_.zero->stage() == 1) ensure_bucket_memory(b);
  }
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
  released_ = 0;
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
  ensure_bucket_memory(static_cast<std::size_t>(bucket_of_[parameter]));
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
  release_reduced_buckets();
}

void DataParallel::ensure_bucket_memory(std::size_t index) {
  Bucket& bucket = buckets_[index];
  if (bucket.flat.defined()) return;
  at::NoGradGuard no_grad;
  // On the parameters' device, in their type.
  bucket.flat = at::empty({bucket.numel}, parameters_[bucket.parameters[0]].second.options());
  std::int64_t used = 0;
  for (int p : bucket.parameters) {
    at::Tensor& param = parameters_[p].second;
    aliases_[p] = alias_into(bucket.flat, offset_in_bucket_[p], param);
    if (param.grad().defined()) {  // keep what was accumulated
      aliases_[p].copy_(param.grad());
      param.mutable_grad() = aliases_[p];
    } else {
      aliases_[p].zero_();  // every gradient lands here before the bucket starts
    }
    used += param.numel();
  }
  // ZeRO's padding takes part in the reduce-scatter as zeros.
  if (bucket.numel > used) bucket.flat.narrow(0, used, bucket.numel - used).zero_();
}

void DataParallel::release_bucket(std::size_t index) {
  Bucket& bucket = buckets_[index];
  for (int p : bucket.parameters) {
    parameters_[p].second.mutable_grad().reset();
    aliases_[p].reset();
  }
  bucket.flat.reset();
}

void DataParallel::release_reduced_buckets() {
  if (!options_.zero || options_.zero->stage() < 2) return;
  // In bucket order, as far as the reduce-scatters have got; finish() frees the rest.
  while (released_ < next_bucket_ && buckets_[released_].work->completed()) {
    release_bucket(released_++);
  }
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
      std::string missing, all;
      int count = 0;
      for (std::size_t p = 0; p < parameters_.size(); ++p) {
        if (ready_[p]) continue;
        if (count++ < 8) missing += (missing.empty() ? "" : ", ") + parameters_[p].first;
        all += (all.empty() ? "" : ",") + parameters_[p].first;
      }
      if (count > 8) missing += ", ... (" + std::to_string(count) + " in all)";
      throw Error(
          "DataParallel: parameters got no gradient in this backward: " + missing + " (rank " +
              std::to_string(comm_.rank()) + " of " + std::to_string(comm_.world()) +
              "); if the model skips them on purpose, set parallel.find_unused_parameters: true",
          {{"problem", "no_gradient"},
           {"key", "parallel.find_unused_parameters"},
           {"parameters", all},
           {"rank", std::to_string(comm_.rank())}});
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
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    bucket.work->wait(comm_.options().timeout);
    if (bucket.wire.defined()) bucket.flat.copy_(bucket.wire);
    last_done = std::max(last_done, bucket.work->finished_at());
    // ZeRO-2 may have freed the bucket already.
    bytes += static_cast<std::size_t>(bucket.numel) *
             (bucket.wire.defined() ? bucket.wire.element_size()
                                    : parameters_[bucket.parameters[0]].second.element_size());
  }
  if (options_.zero) {
    if (options_.zero->stage() >= 2) {
      while (released_ < buckets_.size()) release_bucket(released_++);
    }
    options_.zero->attach_gradients();
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
  ensure_bucket_memory(static_cast<std::size_t>(bucket_of_[parameter]));
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
