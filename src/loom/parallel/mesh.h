// The training ranks of a job as a grid with named dimensions, outermost first, as torch's
// DeviceMesh names them. Loom's plan lays its ranks out as ("data", D) x ("pipeline", P) x
// ("tensor", T), each dimension present where its size is above 1 (data always): rank
// r = (d P + p) T + t. The innermost dimension has the most frequent collectives, so that its
// ranks are neighbours (one host where ranks fill hosts in order): a tensor group's, then a
// pipeline's. Parameter servers are not in the grid: they are the job's last ranks, after every
// training rank.
//
// A rank's place is its coordinate along each dimension; the group along a dimension through a
// rank is the ranks that share every other coordinate with it (its pipeline, its stage's
// replicas). Each dimension's piece of the layout makes its communicator over that group.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom::parallel {

// The names the plan gives its dimensions.
inline constexpr std::string_view kDataDim = "data";
inline constexpr std::string_view kPipelineDim = "pipeline";
inline constexpr std::string_view kTensorDim = "tensor";

struct MeshDim {
  std::string name;
  int size = 1;
};

class Mesh {
 public:
  Mesh() = default;  // one rank
  // Throws Error for a size below 1 or a name given twice.
  explicit Mesh(std::vector<MeshDim> dims);

  int ranks() const;
  const std::vector<MeshDim>& dims() const { return dims_; }
  // A dimension the mesh does not have has size 1, and every rank's coordinate along it is 0.
  int size(std::string_view name) const;
  int coordinate(int rank, std::string_view name) const;
  // The ranks along dimension `name` through `rank`, by their coordinate along it.
  std::vector<int> group(int rank, std::string_view name) const;
  // A name for that group, the same on each of its ranks and different for every other group of
  // the mesh: "pipeline[data=1]".
  std::string group_name(int rank, std::string_view name) const;
  // The first group along `name` whose ranks are on more than one host (`host_of_rank`: each
  // rank's host, by rank); empty when every group is on one host (a tensor group's collectives
  // then stay in shared memory).
  std::vector<int> group_across_hosts(std::string_view name,
                                      const std::vector<int>& host_of_rank) const;
  // "data 2 x pipeline 4"; "1 rank" for a mesh without dimensions.
  std::string describe() const;

 private:
  int index_of(std::string_view name) const;  // -1: not a dimension of the mesh
  int stride(int index) const;                // ranks between neighbours along dimension `index`
  void check_rank(int rank) const;

  std::vector<MeshDim> dims_;
};

}  // namespace loom::parallel
