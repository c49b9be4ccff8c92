// A checkpoint's ZeRO-3 parameters, from every rank's shards to rank 0 one bucket at a time, so
// that rank 0 never holds the whole model to write it (as a pipeline's stages stream theirs):
// rank 0 lays the parameters out as tensors to fetch, and the first fetch of a bucket's
// parameter takes in that bucket's shards from the other ranks and puts them together. They
// are laid out bucket by bucket and a writer fetches in order, so each bucket is put together
// once and dropped when the next one comes.
//
// Collective over the partition's group: the other ranks send their shards of every bucket, in
// the order rank 0 takes them, and return once rank 0 has taken them all.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/core/tensor_to_fetch.h"
#include "loom/parallel/zero_partition.h"

namespace loom::parallel {

struct StreamedParameters {
  std::vector<TensorToFetch> to_fetch;  // the partition's parameters, bucket by bucket
  // Takes in what was not fetched (all of it after a failed write), so that the other ranks'
  // sends complete; call it once the writing is over.
  std::function<void()> finish;
};

// Rank 0's parameters to fetch; nullopt on the others (after their shards are taken).
std::optional<StreamedParameters> stream_parameters(const ZeroPartition& partition,
                                                    comm::Communicator& group);

}  // namespace loom::parallel
