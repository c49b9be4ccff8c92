#include "loom/parallel/optimizer_shards.h"

#include <algorithm>
#include <numeric>

namespace loom::parallel {

std::vector<int> assign_owners(const models::NamedTensors& parameters, int ranks) {
  std::vector<size_t> order(parameters.size());
  std::iota(order.begin(), order.end(), 0);
  // Stable: equal sizes keep the model's order, so the partition does not depend on the sort.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return parameters[a].second.numel() > parameters[b].second.numel();
  });
  std::vector<int64_t> held(static_cast<size_t>(ranks), 0);
  std::vector<int> owners(parameters.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(held.begin(), held.end()) - held.begin();
    owners[i] = static_cast<int>(least);
    held[static_cast<size_t>(least)] += parameters[i].second.numel();
  }
  return owners;
}

models::NamedTensors owned_by(const models::NamedTensors& parameters,
                              const std::vector<int>& owners, int rank) {
  models::NamedTensors out;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (owners[i] == rank) out.push_back(parameters[i]);
  }
  return out;
}

}  // namespace loom::parallel
