// Tensor parallelism for a script's own module (loom.parallel.TensorParallel): the job's tensor
// group (the mesh's innermost dimension, consecutive ranks) as a models::TensorGroup over Loom's
// communicator (shared memory inside a host, tcp between hosts), and the pieces of
// models/tensor_parallel.h over it: enter_split and leave_split (C++ autograd functions, which
// torch tensors from Python go through as they are: the package runs on torch's own LibTorch),
// slice_of, and whole_of over every rank's slice. Which linears are cut how is the Python
// side's plan; this file only binds the cuts and the group, with the layout the group makes of
// the job's ranks and the phase its collectives are charged to (for loom.profile.Steps).
//
// Threading: the script's. Collective methods (sum, broadcast, whole_of, leave_split's forward,
// enter_split's backward) are called by every rank of the group in the same order.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "loom/core/error.h"
#include "loom/core/step_phase.h"
#include "loom/models/tensor_parallel.h"
#include "loom/parallel/mesh.h"
#include "loom/train/job.h"
#include "loom/train/step_accounting.h"

namespace loom::python {
namespace {

// The job's layout with its training ranks as ("data", D) x ("tensor", T), as plan_layout lays
// out parallel.tensor: the job's own plan where its configuration set parallel.tensor, else
// the job's plan with a tensor dimension of `tensor` ranks (none for 1). What the tensor group
// is made over, and what loom.profile.Steps accounts the script's steps under (a tensor
// group's ranks share their replica's samples).
parallel::LayoutPlan tensor_layout(const train::Job& job, int tensor) {
  const parallel::LayoutPlan& plan = job.plan;
  const std::string asked = "tensor: " + std::to_string(tensor) + " ranks a group";
  if (plan.servers || plan.pipeline) {
    throw ConfigError(
        asked + ", but this job is laid out as " + plan.describe() +
            "; TensorParallel splits layers over the training ranks of a job without "
            "parameter servers or pipelines",
        {{"key", "tensor"}, {"value", std::to_string(tensor)}, {"problem", "layout"}});
  }
  if (plan.tensor) {
    if (plan.tensor->ranks != tensor) {
      throw ConfigError(asked + ", but the job was joined with parallel.tensor " +
                            std::to_string(plan.tensor->ranks),
                        {{"key", "tensor"},
                         {"value", std::to_string(tensor)},
                         {"expected", std::to_string(plan.tensor->ranks)}});
    }
    return plan;
  }
  if (tensor < 1 || plan.trainers % tensor != 0) {
    throw ConfigError(asked + ": the job's " + std::to_string(plan.trainers) +
                          " training ranks do not split into tensor groups of " +
                          std::to_string(tensor),
                      {{"key", "tensor"},
                       {"value", std::to_string(tensor)},
                       {"ranks", std::to_string(plan.trainers)}});
  }
  if (tensor == 1) return plan;
  parallel::LayoutPlan out = plan;
  out.data.replicas = plan.trainers / tensor;
  out.mesh = parallel::Mesh({{std::string(parallel::kDataDim), out.data.replicas},
                             {std::string(parallel::kTensorDim), tensor}});
  out.data.replica = out.mesh.coordinate(plan.rank, parallel::kDataDim);
  out.tensor = parallel::TensorDim{tensor, out.mesh.coordinate(plan.rank, parallel::kTensorDim)};
  return out;
}

// This rank's tensor group. Owns its communicator (none for a group of one rank).
class ScriptTensorGroup : public models::TensorGroup {
 public:
  // `index` tells apart the groups a script makes (every rank makes them in the same order).
  ScriptTensorGroup(train::Job& job, int tensor, int index) : layout_(tensor_layout(job, tensor)) {
    const parallel::Mesh& mesh = layout_.mesh;
    if (mesh.size(parallel::kTensorDim) == 1) return;
    const int rank = job.plan.rank;
    comm_ = job.group_maker()(
        mesh.group(rank, parallel::kTensorDim),
        "script" + std::to_string(index) + "-" + mesh.group_name(rank, parallel::kTensorDim));
  }

  int rank() const override { return comm_ ? comm_->rank() : 0; }
  int size() const override { return comm_ ? comm_->world() : 1; }
  int replicas() const { return layout_.data.replicas; }
  const parallel::LayoutPlan& layout() const { return layout_; }
  std::string backend() const { return comm_ ? comm_->backend() : "local"; }

  void sum(at::Tensor& tensor) override {
    if (!comm_) return;
    check_on_cpu(tensor, "sum");
    comm_->allreduce(tensor, comm::ReduceOp::kSum)->wait(comm_->options().timeout);
  }
  // The split linears' sums (enter_split's and leave_split's), charged as `loom train`'s tensor
  // groups charge theirs (parallel/tensor_ranks.cpp): a training step's to tensor_comm, then to
  // the forward or backward they interrupted; a forward without gradients' to no step.
  void sum_in(at::Tensor& tensor, models::SumPass pass) override {
    if (!comm_) return;
    models::charged_to_tensor_comm(phases_, pass, [&] { sum(tensor); });
  }
  // Where sum_in charges (loom.profile.Steps' accounting; not owned); null: nowhere.
  void set_phase_sink(PhaseSink* sink) { phases_ = sink; }

  // The group's first rank's values of `tensor`, in place on every rank.
  void broadcast(const at::Tensor& tensor) {
    if (!comm_) return;
    check_on_cpu(tensor, "broadcast");
    at::Tensor flat = tensor.contiguous();
    comm_->broadcast(flat, 0)->wait(comm_->options().timeout);
    if (!flat.is_same(tensor)) tensor.copy_(flat);
  }

  // The whole tensor from every rank's `slice` of it, on every rank.
  at::Tensor whole_of(const at::Tensor& slice, const models::TensorSplit& split) {
    if (!comm_) return models::whole_of({slice.contiguous()}, split);
    check_on_cpu(slice, "whole_of");
    const at::Tensor mine = slice.contiguous();
    at::Tensor all = at::empty({size() * mine.numel()}, mine.options());
    comm_->allgather(mine, all)->wait(comm_->options().timeout);
    std::vector<int64_t> sizes = {size()};
    for (int64_t s : mine.sizes()) sizes.push_back(s);
    return models::whole_of(all.view(sizes).unbind(0), split);
  }

 private:
  // Loom's communicators move CPU tensors (comm/communicator.h).
  void check_on_cpu(const at::Tensor& tensor, const char* what) const {
    if (tensor.device().is_cpu()) return;
    throw Error("tensor parallel: " + std::string(what) + " of a tensor on " +
                tensor.device().str() + " (rank " + std::to_string(rank()) + " of " +
                std::to_string(size()) + "); the group's communicator moves CPU tensors");
  }

  parallel::LayoutPlan layout_;
  std::unique_ptr<comm::Communicator> comm_;
  PhaseSink* phases_ = nullptr;
};

models::TensorSplit split_of(int64_t dim, int64_t sections) {
  if (sections < 1) {
    throw ConfigError("sections: " + std::to_string(sections) + " sections; at least 1");
  }
  return models::TensorSplit{dim, sections};
}

}  // namespace

void bind_tensor_parallel(py::module_& m) {
  py::class_<ScriptTensorGroup>(m, "TensorGroup",
                                "This rank's tensor group: consecutive training ranks that split "
                                "a module's linears between them.")
      .def(py::init([](train::Job& job, int tensor, int index) {
             py::gil_scoped_release release;  // the group's ranks meet
             return std::make_unique<ScriptTensorGroup>(job, tensor, index);
           }),
           py::arg("job"), py::arg("tensor"), py::arg("index"), py::keep_alive<1, 2>())
      .def_property_readonly("rank", &ScriptTensorGroup::rank)
      .def_property_readonly("size", &ScriptTensorGroup::size)
      .def_property_readonly("replicas", &ScriptTensorGroup::replicas,
                             "Tensor groups in the job (its data-parallel replicas).")
      .def_property_readonly("backend", &ScriptTensorGroup::backend)
      .def_property_readonly("layout", &ScriptTensorGroup::layout,
                             "The job's ranks as data x tensor (a loom.distributed.Layout).")
      .def(
          "account_in",
          [](ScriptTensorGroup& g, train::StepAccounting& steps) { g.set_phase_sink(&steps); },
          py::arg("steps"), py::keep_alive<1, 2>(),
          "`steps` hears the group's collectives in a training step as tensor_comm.")
      .def("stop_accounting", [](ScriptTensorGroup& g) { g.set_phase_sink(nullptr); })
      .def(
          "enter_split",
          [](ScriptTensorGroup& g, const at::Tensor& x) { return models::enter_split(x, g); },
          py::arg("x"),
          "x (replicated) going into a product split by outputs: x forward; the ranks' "
          "gradients of x summed in backward.")
      .def(
          "leave_split",
          [](ScriptTensorGroup& g, const at::Tensor& y) { return models::leave_split(y, g); },
          py::arg("y"), py::call_guard<py::gil_scoped_release>(),
          "This rank's partial product out of a product split by inputs, summed over the group "
          "(collective); its gradient goes to every rank as it is.")
      .def(
          "sum",
          [](ScriptTensorGroup& g, at::Tensor tensor) {
            g.sum(tensor);
            return tensor;
          },
          py::arg("tensor"), py::call_guard<py::gil_scoped_release>(),
          "Sums a contiguous tensor over the group, in place (collective).")
      .def("broadcast", &ScriptTensorGroup::broadcast, py::arg("tensor"),
           py::call_guard<py::gil_scoped_release>(),
           "The group's first rank's values of `tensor`, in place (collective).")
      .def(
          "slice_of",
          [](const ScriptTensorGroup& g, const at::Tensor& whole, int64_t dim, int64_t sections) {
            return models::slice_of(whole, split_of(dim, sections), g.rank(), g.size());
          },
          py::arg("whole"), py::arg("dim"), py::arg("sections"),
          "This rank's slice of `whole` cut along `dim` (each of `sections` equal sections cut "
          "into one part a rank); loom.Error when a section does not divide by the ranks.")
      .def(
          "whole_of",
          [](ScriptTensorGroup& g, const at::Tensor& slice, int64_t dim, int64_t sections) {
            return g.whole_of(slice, split_of(dim, sections));
          },
          py::arg("slice"), py::arg("dim"), py::arg("sections"),
          py::call_guard<py::gil_scoped_release>(),
          "The whole tensor from every rank's slice (as slice_of cut it), on every rank "
          "(collective).");
}

}  // namespace loom::python
