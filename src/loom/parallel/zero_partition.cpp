#include "loom/parallel/zero_partition.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <map>

#include "loom/core/error.h"

namespace loom::parallel {
namespace {

// "<prefix>.<field>" entries of `state` whose field has no dot of its own: a parameter named
// like another's prefix ("a" and "a.b") does not lend it its fields.
std::vector<std::string> fields_of(const std::map<std::string, at::Tensor>& state,
                                   const std::string& prefix) {
  std::vector<std::string> fields;
  const std::string start = prefix + ".";
  for (auto it = state.lower_bound(start); it != state.end(); ++it) {
    if (it->first.compare(0, start.size(), start) != 0) break;
    std::string field = it->first.substr(start.size());
    if (field.find('.') == std::string::npos) fields.push_back(std::move(field));
  }
  return fields;
}

}  // namespace

at::Tensor alias_into(const at::Tensor& flat, std::int64_t offset, const at::Tensor& like) {
  at::Tensor alias = at::empty({0}, flat.options());
  const auto strides = like.is_non_overlapping_and_dense()
                           ? like.strides().vec()
                           : at::empty(like.sizes()).strides().vec();
  alias.set_(flat.storage(), flat.storage_offset() + offset, like.sizes(), strides);
  return alias;
}

ZeroPartition::ZeroPartition(const NamedTensors& parameters, int rank, int ranks,
                             const BucketLimits& limits, int stage,
                             const std::set<std::string>& alone,
                             const std::vector<std::vector<std::string>>& units)
    : rank_(rank), ranks_(ranks), stage_(stage) {
  if (stage < 1 || stage > 3) {
    throw ConfigError("config key 'parallel.zero': stage " + std::to_string(stage) +
                      " is not 1, 2 or 3");
  }
  for (const auto& named : parameters) {
    if (named.second.requires_grad()) parameters_.push_back(named);
  }
  trained_parameters_ = parameters_.size();
  if (shards_parameters()) {
    for (const auto& named : parameters) {
      if (!named.second.requires_grad()) parameters_.push_back(named);
    }
  }
  // The trained buckets first: their indices are the gradient buckets' and the shards'.
  std::vector<std::vector<int>> plan = plan_buckets_of(limits, alone, units, true);
  trained_buckets_ = plan.size();
  for (auto& frozen : plan_buckets_of(limits, {}, units, false)) plan.push_back(std::move(frozen));
  at::NoGradGuard no_grad;
  offsets_.assign(parameters_.size(), 0);
  bucket_of_.assign(parameters_.size(), 0);
  for (const auto& members : plan) {
    Bucket bucket;
    bucket.parameters = members;
    std::int64_t used = 0;
    for (int p : bucket.parameters) offsets_[p] = used, used += parameters_[p].second.numel();
    bucket.numel = (used + ranks_ - 1) / ranks_ * ranks_;
    const auto options = parameters_[bucket.parameters[0]].second.options().requires_grad(false);
    bucket.values = at::zeros({bucket.numel}, options);
    for (int p : bucket.parameters) {
      // The parameter's memory moves into the bucket; every holder of the tensor sees it there.
      at::Tensor& param = parameters_[p].second;
      at::Tensor home = alias_into(bucket.values, offsets_[p], param);
      home.copy_(param);
      param.set_(home.storage(), home.storage_offset(), home.sizes(), home.strides());
      bucket_of_[p] = buckets_.size();
    }
    const std::size_t b = buckets_.size();
    at::Tensor shard = bucket.values.narrow(0, rank_ * shard_numel(bucket), shard_numel(bucket));
    // Stage 3's shard outlives the bucket's whole memory; the others' are a part of it.
    bucket.shard = shards_parameters()
                       ? shard.clone()
                       : alias_into(bucket.values, rank_ * shard_numel(bucket), shard);
    if (b < trained_buckets_) {
      bucket.grad = at::zeros({bucket.numel / ranks_}, options);
      bucket.shard.requires_grad_(true);
      shards_.emplace_back(shard_name(b, rank_), bucket.shard);
    }
    buckets_.push_back(std::move(bucket));
  }
  attach_gradients();
}

std::vector<std::vector<int>> ZeroPartition::plan_buckets_of(
    const BucketLimits& limits, const std::set<std::string>& alone,
    const std::vector<std::vector<std::string>>& units, bool trained) {
  const int first = trained ? 0 : static_cast<int>(trained_parameters_);
  const int end =
      trained ? static_cast<int>(trained_parameters_) : static_cast<int>(parameters_.size());
  std::vector<std::vector<int>> plan;
  std::vector<char> planned(parameters_.size(), 0);
  // A unit's parameters, in the model's order, as one bucket; the last unit first.
  for (auto unit = units.rbegin(); unit != units.rend(); ++unit) {
    std::vector<int> members;
    for (const std::string& name : *unit) {
      const int p = index_of(name);
      if (p >= first && p < end && !planned[p]) members.push_back(p), planned[p] = 1;
    }
    std::sort(members.begin(), members.end());
    if (!members.empty()) plan.push_back(std::move(members));
  }
  std::vector<GradientInfo> gradients;
  for (const auto& [name, param] : parameters_) {
    gradients.push_back({param.numel(), param.scalar_type()});
  }
  // Runs of backward's rough order (reverse registration) between parameters that go alone,
  // planned as usual; those alone between.
  std::vector<int> run;
  const auto plan_run = [&] {
    for (auto& bucket : plan_buckets(gradients, run, limits)) plan.push_back(std::move(bucket));
    run.clear();
  };
  for (int p = end - 1; p >= first; --p) {
    if (planned[p]) continue;
    if (!alone.count(parameters_[p].first)) {
      run.push_back(p);
      continue;
    }
    plan_run();
    plan.push_back({p});
  }
  plan_run();
  return plan;
}

int ZeroPartition::index_of(const std::string& name) const {
  for (std::size_t p = 0; p < parameters_.size(); ++p) {
    if (parameters_[p].first == name) return static_cast<int>(p);
  }
  return -1;
}

std::string ZeroPartition::shard_name(std::size_t bucket, int rank) const {
  return "zero.bucket" + std::to_string(bucket) + ".rank" + std::to_string(rank);
}

std::vector<std::vector<int>> ZeroPartition::bucket_plan() const {
  std::vector<std::vector<int>> plan;
  for (std::size_t b = 0; b < trained_buckets_; ++b) plan.push_back(buckets_[b].parameters);
  return plan;
}

std::vector<std::pair<int, at::Tensor>> ZeroPartition::gradient_pieces() const {
  std::vector<std::pair<int, at::Tensor>> out;
  for (std::size_t b = 0; b < trained_buckets_; ++b) {
    const Bucket& bucket = buckets_[b];
    const std::int64_t begin = rank_ * shard_numel(bucket), end = begin + shard_numel(bucket);
    for (int p : bucket.parameters) {
      const std::int64_t first = std::max(begin, offsets_[p]);
      const std::int64_t last = std::min(end, offsets_[p] + parameters_[p].second.numel());
      if (first < last) out.emplace_back(p, bucket.grad.narrow(0, first - begin, last - first));
    }
  }
  return out;
}

void ZeroPartition::attach_gradients() {
  for (std::size_t b = 0; b < trained_buckets_; ++b) {
    shards_[b].second.mutable_grad() = buckets_[b].grad;
  }
}

void ZeroPartition::gather_parameters(comm::Communicator& comm) {
  if (shards_parameters()) {
    for (std::size_t b = 0; b < buckets_.size(); ++b) gather_bucket(b, comm);
    for (std::size_t b = 0; b < buckets_.size(); ++b) wait_whole(b, comm);
    pinned_ = true;
    return;
  }
  std::vector<at::Tensor> sent;  // kept alive until every gather is done
  std::vector<comm::WorkPtr> works;
  for (const Bucket& bucket : buckets_) {
    sent.push_back(
        bucket.values.narrow(0, rank_ * shard_numel(bucket), shard_numel(bucket)).clone());
    works.push_back(comm.allgather(sent.back(), bucket.values));
  }
  for (auto& work : works) work->wait(comm.options().timeout);
}

std::int64_t ZeroPartition::values_bytes(const Bucket& bucket) const {
  return bucket.numel * static_cast<std::int64_t>(bucket.values.element_size());
}

void ZeroPartition::shard_parameters() {
  if (!shards_parameters()) return;
  at::NoGradGuard no_grad;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    bucket.shard.copy_(bucket.values.narrow(0, rank_ * shard_numel(bucket), shard_numel(bucket)));
    release_bucket(b);
  }
}

void ZeroPartition::gather_bucket(std::size_t index, comm::Communicator& comm) {
  Bucket& bucket = buckets_[index];
  if (bucket.whole || bucket.gathering) return;
  // The same storage the parameters (and what autograd saved of them) point into, with memory
  // again; the gather fills it.
  c10::StorageImpl* storage = bucket.values.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(values_bytes(bucket));
  // A GPU's allocator allocates on the current device, which need not be the bucket's (autograd's
  // threads, a rank other than the process's first GPU): at::empty guards itself, this does not.
  const c10::DeviceGuard on_the_bucket_device(bucket.values.device());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
  bucket.gathering = comm.allgather(bucket.shard.detach(), bucket.values);
}

ZeroPartition::~ZeroPartition() {
  for (Bucket& bucket : buckets_) {
    if (!bucket.gathering) continue;
    try {
      bucket.gathering->wait(std::chrono::seconds(30));
    } catch (const std::exception&) {
      // The run is being torn down by another error, which is the one reported.
    }
  }
}

void ZeroPartition::wait_if_gathering(std::size_t index, comm::Communicator& comm) {
  if (buckets_[index].gathering) wait_whole(index, comm);
}

void ZeroPartition::wait_whole(std::size_t index, comm::Communicator& comm) {
  Bucket& bucket = buckets_[index];
  if (bucket.whole) return;
  if (!bucket.gathering) {
    throw Error("ZeRO-3: bucket " + std::to_string(index) +
                " was waited for but never gathered (rank " + std::to_string(rank_) + " of " +
                std::to_string(ranks_) + ")");
  }
  bucket.gathering->wait(comm.options().timeout);
  bucket.gathering.reset();
  bucket.whole = true;
}

void ZeroPartition::release_bucket(std::size_t index) {
  Bucket& bucket = buckets_[index];
  if (!shards_parameters() || pinned_ || !bucket.whole) return;
  // Freed, not dropped: the parameters keep their shapes over an empty storage until the next
  // gather gives it memory again.
  bucket.values.storage().unsafeGetStorageImpl()->reset();
  bucket.whole = false;
}

const at::Tensor& ZeroPartition::gradient_shard_of(const std::string& name) const {
  for (std::size_t b = 0; b < trained_buckets_; ++b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.parameters.size() == 1 && parameters_[bucket.parameters[0]].first == name) {
      return bucket.grad;
    }
  }
  throw Error("ZeRO: parameter '" + name + "' has no bucket of its own");
}

NamedTensors ZeroPartition::shard_state(const NamedTensors& named) const {
  const std::map<std::string, at::Tensor> saved(named.begin(), named.end());
  // Any parameter's field is every parameter's: one without it is named below.
  std::map<std::string, at::Tensor> samples;
  for (std::size_t p = 0; p < trained_parameters_; ++p) {
    const std::string& name = parameters_[p].first;
    for (const std::string& field : fields_of(saved, name)) {
      samples.emplace(field, saved.at(name + "." + field));
    }
  }
  NamedTensors out;
  for (std::size_t b = 0; b < trained_buckets_; ++b) {
    const Bucket& bucket = buckets_[b];
    for (const auto& [field, sample] : samples) {
      const std::string shard = shard_name(b, rank_) + "." + field;
      if (sample.dim() == 0) {  // a count every parameter shares (Adam's step)
        out.emplace_back(shard, sample.clone());
        continue;
      }
      at::Tensor flat = at::zeros({bucket.numel}, sample.options());
      for (int p : bucket.parameters) {
        const auto& [name, param] = parameters_[p];
        auto it = saved.find(name + "." + field);
        if (it == saved.end()) {
          throw Error("checkpoint: optimizer state '" + name + "." + field + "' is missing",
                      {{"tensor", name + "." + field}, {"problem", "missing"}});
        }
        if (it->second.sizes() != param.sizes()) {
          throw Error("checkpoint: optimizer state '" + name + "." + field + "' has shape " +
                      c10::str(it->second.sizes()) + ", expected " + c10::str(param.sizes()));
        }
        alias_into(flat, offsets_[p], param).copy_(it->second);
      }
      out.emplace_back(shard,
                       flat.narrow(0, rank_ * shard_numel(bucket), shard_numel(bucket)).clone());
    }
  }
  return out;
}

NamedTensors ZeroPartition::named_state(const NamedTensors& every_rank) const {
  const std::map<std::string, at::Tensor> saved(every_rank.begin(), every_rank.end());
  NamedTensors out;
  for (std::size_t b = 0; b < trained_buckets_; ++b) {
    const Bucket& bucket = buckets_[b];
    for (const std::string& field : fields_of(saved, shard_name(b, 0))) {
      std::vector<at::Tensor> shards;
      for (int r = 0; r < ranks_; ++r) {
        auto it = saved.find(shard_name(b, r) + "." + field);
        if (it == saved.end()) {
          throw Error("ZeRO: rank " + std::to_string(r) + " sent no optimizer state '" + field +
                      "' for bucket " + std::to_string(b));
        }
        shards.push_back(it->second);
      }
      const bool count = shards[0].dim() == 0;
      const at::Tensor flat = count ? at::Tensor() : at::cat(shards);
      for (int p : bucket.parameters) {
        const auto& [name, param] = parameters_[p];
        // Contiguous copies: a checkpoint writes each tensor on its own.
        out.emplace_back(
            name + "." + field,
            count ? shards[0].clone()
                  : alias_into(flat, offsets_[p], param).clone(at::MemoryFormat::Contiguous));
      }
    }
  }
  return out;
}

std::string ReduceScatterExchange::describe() const {
  const int stage = partition_.stage();
  return "reduce-scatter over " + comm_.backend() + ", ZeRO-" + std::to_string(stage) +
         ": optimizer state" + (stage == 2 ? " and gradients" : "") +
         (stage == 3 ? ", gradients and parameters" : "") + " sharded over " +
         std::to_string(partition_.ranks()) + " ranks, parameters all-gathered" +
         (stage == 3 ? " block by block" : "");
}

}  // namespace loom::parallel
