#include "loom/parallel/mesh.h"

#include "loom/core/error.h"

namespace loom::parallel {

Mesh::Mesh(std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].size < 1) {
      throw Error("mesh: dimension '" + dims_[i].name + "' has size " +
                  std::to_string(dims_[i].size) + "; at least 1");
    }
    for (size_t j = 0; j < i; ++j) {
      if (dims_[j].name == dims_[i].name) {
        throw Error("mesh: dimension '" + dims_[i].name + "' is given twice");
      }
    }
  }
}

int Mesh::ranks() const {
  int ranks = 1;
  for (const MeshDim& d : dims_) ranks *= d.size;
  return ranks;
}

int Mesh::index_of(std::string_view name) const {
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Mesh::stride(int index) const {
  int stride = 1;
  for (size_t i = static_cast<size_t>(index) + 1; i < dims_.size(); ++i) stride *= dims_[i].size;
  return stride;
}

void Mesh::check_rank(int rank) const {
  if (rank < 0 || rank >= ranks()) {
    throw Error("mesh: rank " + std::to_string(rank) + " is outside " + describe() + " (" +
                std::to_string(ranks()) + " ranks)");
  }
}

int Mesh::size(std::string_view name) const {
  const int i = index_of(name);
  return i < 0 ? 1 : dims_[static_cast<size_t>(i)].size;
}

int Mesh::coordinate(int rank, std::string_view name) const {
  check_rank(rank);
  const int i = index_of(name);
  return i < 0 ? 0 : rank / stride(i) % dims_[static_cast<size_t>(i)].size;
}

std::vector<int> Mesh::group(int rank, std::string_view name) const {
  check_rank(rank);
  const int i = index_of(name);
  if (i < 0) return {rank};
  const int step = stride(i);
  const int first = rank - coordinate(rank, name) * step;
  std::vector<int> ranks;
  for (int c = 0; c < dims_[static_cast<size_t>(i)].size; ++c) ranks.push_back(first + c * step);
  return ranks;
}

std::string Mesh::group_name(int rank, std::string_view name) const {
  std::string others;
  for (const MeshDim& d : dims_) {
    if (d.name == name) continue;
    others += (others.empty() ? "" : ",") + d.name + "=" + std::to_string(coordinate(rank, d.name));
  }
  return std::string(name) + "[" + others + "]";
}

std::vector<int> Mesh::group_across_hosts(std::string_view name,
                                          const std::vector<int>& host_of_rank) const {
  for (int rank = 0; rank < ranks() && rank < static_cast<int>(host_of_rank.size()); ++rank) {
    if (coordinate(rank, name) != 0) continue;  // each group once, from its first rank
    const std::vector<int> ranks_of_group = group(rank, name);
    for (int r : ranks_of_group) {
      if (r >= static_cast<int>(host_of_rank.size()) ||
          host_of_rank[static_cast<size_t>(r)] != host_of_rank[static_cast<size_t>(rank)]) {
        return ranks_of_group;
      }
    }
  }
  return {};
}

std::string Mesh::describe() const {
  if (dims_.empty()) return "1 rank";
  std::string text;
  for (const MeshDim& d : dims_) {
    text += (text.empty() ? "" : " x ") + d.name + " " + std::to_string(d.size);
  }
  return text;
}

}  // namespace loom::parallel
