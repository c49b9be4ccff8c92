// How the parts of a job (layouts, a script's tensor groups) ask for a communicator over some of
// its ranks without knowing how the job reached them: train/job.h's Job makes one over its
// rendezvous (make_communicator.h's make_group_communicator).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"

namespace loom::comm {

// Builds a communicator over some of the job's ranks (ascending; group rank i is ranks[i]),
// named so that its store keys differ from every other group's; every member calls it with the
// same ranks and name.
using MakeGroup = std::function<std::unique_ptr<Communicator>(const std::vector<int>& ranks,
                                                              const std::string& name)>;

}  // namespace loom::comm
