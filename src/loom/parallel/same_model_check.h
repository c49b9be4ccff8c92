// Before rank 0's parameters are copied to the other ranks, every rank must hold the same
// tensors (names, shapes and types, in the same order): a model built differently on one rank
// (another config, a branch on the rank in the script) would otherwise garble the copy or hang a
// later collective. The check exchanges one fingerprint per rank and, only when they differ,
// rank 0's list, so that every rank names the first difference.
#pragma once

#include <ATen/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "loom/comm/communicator.h"

namespace loom::parallel {

// Collective over `comm`. Throws Error on every rank when the ranks' tensors differ: a rank that
// differs from rank 0 names the first difference ("tensor 3 is 'fc.weight' [10, 64] Float on
// rank 0 and 'fc.weight' [10, 128] Float on rank 1"), the others name the ranks that differ.
void check_same_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        comm::Communicator& comm, const std::string& what);

}  // namespace loom::parallel
