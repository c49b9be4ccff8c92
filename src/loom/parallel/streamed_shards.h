// A checkpoint's ZeRO shards, from every rank to rank 0 one bucket at a time, so that rank 0
// never holds the whole model or the whole optimizer state to write them (as a pipeline's
// stages stream theirs): rank 0 lays out the parameters (ZeRO-3) and the optimizer state under
// the parameters' names as tensors to fetch, and the first fetch from a bucket's shards takes in
// the other ranks' and puts them together. They are laid out bucket by bucket, the parameters
// first and then the optimizer state, and a writer fetches in order, so each bucket's shards are
// put together once and dropped when the next ones come.
//
// Collective over the partition's group: the other ranks send their shards, in the order rank 0
// takes them, and return once rank 0 has taken them all.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/tensor_to_fetch.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

struct StreamedShards {
  std::vector<TensorToFetch> parameters;  // ZeRO-3's, under their names; none below stage 3
  std::vector<TensorToFetch> optimizer;   // "<parameter>.<field>", as export_optimizer_state
  NamedTensors scalars;  // state every parameter shares (Adam's step), held: it is tiny
  // Takes in what was not fetched (all of it after a failed write), so that the other ranks'
  // sends complete; call it once the writing is over.
  std::function<void()> finish;
};

// Rank 0's tensors to fetch; nullopt on the others (after their shards are taken). `state` is
// this rank's optimizer state of its shards ("zero.bucket<b>.rank<r>.<field>").
std::optional<StreamedShards> stream_shards(const ZeroPartition& partition,
                                            const NamedTensors& state, comm::Communicator& group);

}  // namespace loom::parallel
