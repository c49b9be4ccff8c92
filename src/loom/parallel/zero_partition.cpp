#include "loom/parallel/zero_partition.h"

#include <ATen/ATen.h>

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
                             const std::set<std::string>& alone)
    : rank_(rank), ranks_(ranks), stage_(stage) {
  for (const auto& named : parameters) {
    if (named.second.requires_grad()) parameters_.push_back(named);
  }
  if (stage != 1 && stage != 2) {
    throw ConfigError("config key 'parallel.zero': stage " + std::to_string(stage) +
                      " is not 1 or 2");
  }
  std::vector<GradientInfo> gradients;
  std::vector<int> order(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    gradients.push_back({parameters_[i].second.numel(), parameters_[i].second.scalar_type()});
    order[i] = static_cast<int>(parameters_.size() - 1 - i);  // backward's order, roughly
  }
  // Runs of the order between parameters that go alone, planned as usual; those alone between.
  std::vector<std::vector<int>> plan;
  std::vector<int> run;
  const auto plan_run = [&] {
    for (auto& bucket : plan_buckets(gradients, run, limits)) plan.push_back(std::move(bucket));
    run.clear();
  };
  for (int p : order) {
    if (!alone.count(parameters_[p].first)) {
      run.push_back(p);
      continue;
    }
    plan_run();
    plan.push_back({p});
  }
  plan_run();
  at::NoGradGuard no_grad;
  offsets_.assign(parameters_.size(), 0);
  for (auto& members : plan) {
    Bucket bucket;
    bucket.parameters = std::move(members);
    std::int64_t used = 0;
    for (int p : bucket.parameters) offsets_[p] = used, used += parameters_[p].second.numel();
    bucket.numel = (used + ranks_ - 1) / ranks_ * ranks_;
    const auto options = parameters_[bucket.parameters[0]].second.options().requires_grad(false);
    bucket.values = at::zeros({bucket.numel}, options);
    bucket.grad = at::zeros({bucket.numel / ranks_}, options);
    for (int p : bucket.parameters) {
      // The parameter's memory moves into the bucket; every holder of the tensor sees it there.
      at::Tensor& param = parameters_[p].second;
      at::Tensor home = alias_into(bucket.values, offsets_[p], param);
      home.copy_(param);
      param.set_(home.storage(), home.storage_offset(), home.sizes(), home.strides());
    }
    const std::size_t b = buckets_.size();
    at::Tensor shard = bucket.values.narrow(0, rank_ * shard_numel(bucket), shard_numel(bucket));
    at::Tensor leaf = alias_into(bucket.values, rank_ * shard_numel(bucket), shard);
    leaf.requires_grad_(true);
    shards_.emplace_back(shard_name(b, rank_), leaf);
    buckets_.push_back(std::move(bucket));
  }
  attach_gradients();
}

std::string ZeroPartition::shard_name(std::size_t bucket, int rank) const {
  return "zero.bucket" + std::to_string(bucket) + ".rank" + std::to_string(rank);
}

std::vector<std::vector<int>> ZeroPartition::bucket_plan() const {
  std::vector<std::vector<int>> plan;
  for (const Bucket& bucket : buckets_) plan.push_back(bucket.parameters);
  return plan;
}

void ZeroPartition::attach_gradients() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    shards_[b].second.mutable_grad() = buckets_[b].grad;
  }
}

void ZeroPartition::gather_parameters(comm::Communicator& comm) {
  std::vector<at::Tensor> sent;  // kept alive until every gather is done
  std::vector<comm::WorkPtr> works;
  for (const Bucket& bucket : buckets_) {
    sent.push_back(
        bucket.values.narrow(0, rank_ * shard_numel(bucket), shard_numel(bucket)).clone());
    works.push_back(comm.allgather(sent.back(), bucket.values));
  }
  for (auto& work : works) work->wait(comm.options().timeout);
}

const at::Tensor& ZeroPartition::gradient_shard_of(const std::string& name) const {
  for (const Bucket& bucket : buckets_) {
    if (bucket.parameters.size() == 1 && parameters_[bucket.parameters[0]].first == name) {
      return bucket.grad;
    }
  }
  throw Error("ZeRO: parameter '" + name + "' has no bucket of its own");
}

std::set<std::string> ZeroPartition::shards_of(const std::set<std::string>& names) const {
  std::set<std::string> out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const auto& members = buckets_[b].parameters;
    if (members.size() == 1 && names.count(parameters_[members[0]].first)) {
      out.insert(shard_name(b, rank_));
    }
  }
  return out;
}

NamedTensors ZeroPartition::shard_state(const NamedTensors& named) const {
  const std::map<std::string, at::Tensor> saved(named.begin(), named.end());
  // Any parameter's field is every parameter's: one without it is named below.
  std::map<std::string, at::Tensor> samples;
  for (const auto& [name, param] : parameters_) {
    for (const std::string& field : fields_of(saved, name)) {
      samples.emplace(field, saved.at(name + "." + field));
    }
  }
  NamedTensors out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
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
          throw Error("checkpoint: optimizer state '" + name + "." + field + "' is missing");
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
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
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
  return "reduce-scatter over " + comm_.backend() + ", ZeRO-" + std::to_string(partition_.stage()) +
         ": optimizer state" + (partition_.stage() == 2 ? " and gradients" : "") +
         " sharded over " + std::to_string(partition_.ranks()) + " ranks, parameters all-gathered";
}

}  // namespace loom::parallel
