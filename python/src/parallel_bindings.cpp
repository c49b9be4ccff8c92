// Job and Layout for Python: the job a script's process is a rank of, entered through the one
// job entry (train/job.h), and its plan; the gradient exchange of a user's own module is
// ReplicaSync (replica_sync_bindings.cpp). loom.distributed and loom.parallel wrap them.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <cctype>
#include <optional>
#include <string>

#include "bindings.h"
#include "loom/comm/rendezvous.h"
#include "loom/comm/world_info.h"
#include "loom/core/error.h"
#include "loom/core/termination.h"
#include "loom/parallel/layout_plan.h"
#include "loom/train/job.h"

namespace loom::python {
namespace {

// The job's layout as a script sees it: its ranks and groups, but no step shape. The plan's came
// from the configuration's data.batch_size (the default when a script names none), while the
// script's own loop decides its batch (loom.profile.Steps counts it).
parallel::LayoutPlan script_layout(parallel::LayoutPlan plan) {
  plan.step = parallel::StepShape{};  // no batch: 0 samples, one micro-batch
  return plan;
}

}  // namespace

void bind_parallel(py::module_& m) {
  m.attr("PREEMPTED_EXIT_CODE") = kPreemptedExitCode;
  py::class_<parallel::LayoutPlan>(m, "Layout",
                                   "How the job lays its ranks out and what one step is (the "
                                   "plan of parallel/layout_plan.h); str() says it in words.")
      .def_readonly("world", &parallel::LayoutPlan::world, "Every rank, servers included.")
      .def_readonly("rank", &parallel::LayoutPlan::rank)
      .def_readonly("trainers", &parallel::LayoutPlan::trainers, "The ranks that train.")
      .def_property_readonly(
          "mesh",
          [](const parallel::LayoutPlan& p) {
            py::dict dims;
            for (const parallel::MeshDim& d : p.mesh.dims()) dims[py::str(d.name)] = d.size;
            return dims;
          },
          "The training ranks as named dimensions, outermost first: {'data': 2, 'pipeline': 2}.")
      .def_property_readonly(
          "replicas", [](const parallel::LayoutPlan& p) { return p.data.replicas; },
          "Data-parallel copies of the model.")
      .def_property_readonly("replica",
                             [](const parallel::LayoutPlan& p) { return p.data.replica; })
      .def_property_readonly(
          "servers",
          [](const parallel::LayoutPlan& p) { return p.servers ? p.servers->servers : 0; })
      .def_property_readonly(
          "pipeline_ranks",
          [](const parallel::LayoutPlan& p) { return p.pipeline ? p.pipeline->ranks : 0; })
      .def_property_readonly(
          "pipeline_rank",
          [](const parallel::LayoutPlan& p) { return p.pipeline ? p.pipeline->rank : 0; })
      .def_property_readonly("zero_stage",
                             [](const parallel::LayoutPlan& p) { return p.data.zero_stage; })
      .def_property_readonly("lr_scale",
                             [](const parallel::LayoutPlan& p) { return p.data.lr_scale; })
      .def_property_readonly("global_batch",
                             [](const parallel::LayoutPlan& p) { return p.step.global_batch; })
      .def_property_readonly("replica_batch",
                             [](const parallel::LayoutPlan& p) { return p.step.replica_batch; })
      .def_property_readonly("micro_batch",
                             [](const parallel::LayoutPlan& p) { return p.step.micro_batch; })
      .def_property_readonly("micro_batches",
                             [](const parallel::LayoutPlan& p) { return p.step.micro_batches; })
      .def("__str__", &parallel::LayoutPlan::describe)
      .def("__repr__",
           [](const parallel::LayoutPlan& p) { return "Layout(" + p.describe() + ")"; });
  m.def(
      "layout_manifest",
      [](const std::optional<parallel::LayoutPlan>& layout) {
        return layout.value_or(parallel::LayoutPlan{}).manifest_json();
      },
      py::arg("layout"),
      "A checkpoint manifest's layout (JSON) for a run laid out so (None: one process).");

  py::class_<train::Job>(m, "Job", "The job this process is a rank of (loom.distributed.init).")
      .def("should_stop", &train::Job::end_of_step, py::arg("step"),
           py::call_guard<py::gil_scoped_release>(),
           "After step `step` (the steps done): whether the job stops here (SIGTERM caught on "
           "any rank that steps with this one; collective).")
      .def(
          "barrier",
          [](train::Job& j) {
            if (comm::Communicator* trainers = j.trainers()) {
              trainers->barrier()->wait(trainers->options().timeout);
            }
          },
          py::call_guard<py::gil_scoped_release>(),
          "Returns once every training rank has called it (comm.timeout_s at most).")
      .def_property_readonly("attempt", [](const train::Job&) { return comm::restart_attempt(); })
      .def_property_readonly("rank", [](const train::Job& j) { return j.world.rank; })
      .def_property_readonly("world", [](const train::Job& j) { return j.world.world; })
      .def_property_readonly("local_rank", [](const train::Job& j) { return j.world.local_rank; })
      .def_property_readonly("local_world", [](const train::Job& j) { return j.world.local_world; })
      .def_property_readonly(
          "backend",
          [](const train::Job& j) { return j.communicator ? j.communicator->backend() : ""; })
      .def_property_readonly("layout", [](const train::Job& j) { return script_layout(j.plan); })
      .def_property_readonly("trainers", [](const train::Job& j) { return j.plan.trainers; })
      .def("__repr__", [](const train::Job& j) {
        return "Job(rank " + std::to_string(j.world.rank) + " of " + std::to_string(j.world.world) +
               ": " + script_layout(j.plan).describe() + ")";
      });
  m.def(
      "enter_job",
      [](const Config& config, const std::string& out_dir,
         bool preemptible) -> std::unique_ptr<train::Job> {
        train::JobEntryOptions options;
        options.out_dir = out_dir;
        std::optional<train::JobEntry> entry;
        {
          py::gil_scoped_release release;  // waits for the other ranks; a server serves
          entry.emplace(train::enter_job(config, comm::world_from_environment(), options));
        }
        if (entry->served) return nullptr;
        auto job = std::make_unique<train::Job>(std::move(entry->job));
        // From here on SIGTERM is a request to stop that should_stop() reports.
        if (preemptible) job->termination = &catch_termination();
        return job;
      },
      py::arg("config"), py::arg("out_dir"), py::arg("preemptible"),
      "Enters the job this process is a rank of: the Job on a rank that trains; None on a "
      "parameter server, once it has served its workers to the end.");

  bind_replica_sync(m);
}

}  // namespace loom::python
