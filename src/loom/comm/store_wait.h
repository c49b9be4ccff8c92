// Waiting for other processes' keys in a rendezvous store, so that a wait that runs out can say
// exactly who never came (the rendezvous names ranks, the launcher names nodes).
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace loom::comm {

// Polls until every key is in the store (1 ms, doubling to 50 ms) rather than store.wait(),
// which only says that something is missing. Returns the indices of `keys` still missing when
// `timeout` ran out; empty when all came.
std::vector<std::size_t> wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout);

}  // namespace loom::comm
