#include "loom/parallel/streamed_shards.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "loom/comm/tensor_message.h"
#include "loom/core/error.h"

namespace loom::parallel {
namespace {

// The buckets in the order of their first parameters: the order rank 0 lays them out in.
std::vector<std::size_t> bucket_order(const ZeroPartition& partition) {
  std::vector<std::size_t> order(partition.bucket_count());
  for (std::size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return partition.parameters_in(a).front() < partition.parameters_in(b).front();
  });
  return order;
}

// What travels: one shard of every rank, of a bucket's parameters or of one optimizer field
// of them.
struct Piece {
  std::size_t bucket;
  std::string field;  // "" for the parameters
  at::Tensor own;     // this rank's shard
};

// Every rank lists the same pieces in the same order: the parameters' (ZeRO-3) bucket by bucket,
// then each bucket's optimizer fields. Fields every parameter shares (a 0-d count) do not travel.
std::vector<Piece> pieces_of(const ZeroPartition& partition, const NamedTensors& state,
                             NamedTensors& scalars) {
  std::vector<Piece> pieces;
  const std::vector<std::size_t> order = bucket_order(partition);
  if (partition.shards_parameters()) {
    for (std::size_t b : order) pieces.push_back({b, "", partition.parameter_shard(b).detach()});
  }
  const std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  for (std::size_t b : order) {
    if (!partition.trains(b)) continue;  // a frozen bucket has no optimizer state
    const std::string prefix = partition.shards()[b].first + ".";
    for (auto it = by_name.lower_bound(prefix);
         it != by_name.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      const std::string field = it->first.substr(prefix.size());
      if (it->second.dim() == 0) {
        for (int p : partition.parameters_in(b)) {
          scalars.emplace_back(partition.parameters()[p].first + "." + field, it->second.clone());
        }
        continue;
      }
      pieces.push_back({b, field, it->second.detach()});
    }
  }
  return pieces;
}

// Rank 0's side: the pieces as they arrive, in order, one put together at a time.
class ArrivingPieces {
 public:
  ArrivingPieces(std::vector<Piece> pieces, comm::Communicator& group)
      : pieces_(std::move(pieces)), group_(group) {
    for (int r = 1; r < group.world(); ++r) peers_.emplace_back(group, r, pieces_.size());
  }

  const at::Tensor& take(std::size_t index) {
    if (taken_ == index + 1 && whole_.defined()) return whole_;
    // A writer may skip tensors (it fetches in order), never go back.
    if (index < taken_) {
      throw Error("checkpoint: ZeRO shards of bucket " + std::to_string(pieces_[index].bucket) +
                  " were fetched out of order");
    }
    const at::Tensor& own = pieces_[index].own;
    const int64_t shard = own.numel();
    // In host memory, where the others' shards arrive and the writer copies to anyway.
    whole_ =
        at::empty({shard * group_.world()}, own.options().device(at::kCPU).requires_grad(false));
    whole_.narrow(0, 0, shard).copy_(own);
    for (int r = 1; r < group_.world(); ++r) {
      whole_.narrow(0, r * shard, shard).copy_(peers_[r - 1].take(index));
    }
    taken_ = index + 1;
    return whole_;
  }
  void drain() {
    whole_ = at::Tensor();
    for (comm::PeerTensors& peer : peers_) peer.drain();
  }

 private:
  std::vector<Piece> pieces_;
  comm::Communicator& group_;
  std::vector<comm::PeerTensors> peers_;  // ranks 1, 2, ...
  std::size_t taken_ = 0;                 // pieces before it have arrived
  at::Tensor whole_;                      // piece taken_ - 1, put together
};

}  // namespace

std::optional<StreamedShards> stream_shards(const ZeroPartition& partition,
                                            const NamedTensors& state, comm::Communicator& group) {
  StreamedShards out;
  std::vector<Piece> pieces = pieces_of(partition, state, out.scalars);
  if (group.rank() != 0) {
    comm::PendingSends sends;
    for (const Piece& piece : pieces) comm::send_tensor(group, piece.own, 0, sends);
    sends.wait_all(group.options().timeout);
    return std::nullopt;
  }
  std::vector<std::pair<std::size_t, Piece>> laid_out;
  for (std::size_t i = 0; i < pieces.size(); ++i) laid_out.emplace_back(i, pieces[i]);
  auto arriving = std::make_shared<ArrivingPieces>(std::move(pieces), group);
  for (const auto& [index, piece] : laid_out) {
    auto& into = piece.field.empty() ? out.parameters : out.optimizer;
    for (int p : partition.parameters_in(piece.bucket)) {
      const auto& [name, param] = partition.parameters()[p];
      const int64_t offset = partition.offset_of(p);
      into.push_back({piece.field.empty() ? name : name + "." + piece.field,
                      piece.own.scalar_type(), param.sizes().vec(),
                      [arriving, i = index, offset, like = param] {
                        return alias_into(arriving->take(i), offset, like).contiguous();
                      }});
    }
  }
  out.finish = [arriving] { arriving->drain(); };
  return out;
}

}  // namespace loom::parallel
