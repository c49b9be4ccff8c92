#include "loom/parallel/streamed_shards.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>

#include "loom/comm/tensor_message.h"
#include "loom/core/error.h"

namespace loom::parallel {
namespace {

// The buckets in the order of their first parameters: the order rank 0 lays them out in.
std::vector<std::size_t> fetch_order(const ZeroPartition& partition) {
  std::vector<std::size_t> order(partition.bucket_count());
  for (std::size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return partition.parameters_in(a).front() < partition.parameters_in(b).front();
  });
  return order;
}

// Rank 0's side: the buckets as they arrive, in fetch_order(), one put together at a time.
class ArrivingBuckets {
 public:
  ArrivingBuckets(const ZeroPartition& partition, comm::Communicator& group)
      : partition_(partition), group_(group), order_(fetch_order(partition)) {}

  const at::Tensor& take(std::size_t bucket) {
    if (current_ == bucket && whole_.defined()) return whole_;
    // The writer may skip tensors (it fetches in order), never go back.
    while (next_ < order_.size() && order_[next_] != bucket) skip();
    if (next_ == order_.size()) {
      throw Error("checkpoint: ZeRO-3 bucket " + std::to_string(bucket) +
                  " was fetched out of order");
    }
    ++next_;
    const at::Tensor& own = partition_.parameter_shard(bucket);
    const int64_t shard = own.numel();
    whole_ = at::empty({shard * group_.world()}, own.options().requires_grad(false));
    whole_.narrow(0, 0, shard).copy_(own.detach());
    for (int r = 1; r < group_.world(); ++r) {
      whole_.narrow(0, r * shard, shard).copy_(comm::recv_tensor(group_, r));
    }
    current_ = bucket;
    return whole_;
  }
  void drain() {
    whole_ = at::Tensor();
    while (next_ < order_.size()) skip();
  }

 private:
  void skip() {
    for (int r = 1; r < group_.world(); ++r) comm::recv_tensor(group_, r);
    ++next_;
  }

  const ZeroPartition& partition_;
  comm::Communicator& group_;
  std::vector<std::size_t> order_;
  std::size_t next_ = 0;  // order_[next_] is the next bucket to arrive
  std::size_t current_ = 0;
  at::Tensor whole_;  // bucket current_, put together
};

}  // namespace

std::optional<StreamedParameters> stream_parameters(const ZeroPartition& partition,
                                                    comm::Communicator& group) {
  if (group.rank() != 0) {
    comm::PendingSends sends;
    for (std::size_t b : fetch_order(partition)) {
      comm::send_tensor(group, partition.parameter_shard(b).detach(), 0, sends);
    }
    sends.wait_all(group.options().timeout);
    return std::nullopt;
  }
  auto buckets = std::make_shared<ArrivingBuckets>(partition, group);
  StreamedParameters out;
  for (std::size_t bucket : fetch_order(partition)) {
    for (int p : partition.parameters_in(bucket)) {
      const auto& [name, param] = partition.parameters()[p];
      const int64_t offset = partition.offset_of(p);
      out.to_fetch.push_back(
          {name, param.scalar_type(), param.sizes().vec(), [buckets, bucket, offset, param] {
             return alias_into(buckets->take(bucket), offset, param).contiguous();
           }});
    }
  }
  out.finish = [buckets] { buckets->drain(); };
  return out;
}

}  // namespace loom::parallel
