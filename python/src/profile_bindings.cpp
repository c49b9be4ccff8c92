// StepAccounting for Python (train/step_accounting.h): a script's loop accounted by phase into
// the files `loom train` writes. loom.profile.Steps wraps it.
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "loom/core/error.h"
#include "loom/parallel/layout_plan.h"
#include "loom/train/data_stream.h"
#include "loom/train/job.h"
#include "loom/train/step_accounting.h"

namespace loom::python {
namespace {

profile::Phase phase_named(const std::string& name) {
  for (size_t i = 0; i < profile::kPhaseCount; ++i) {
    const auto phase = static_cast<profile::Phase>(i);
    if (name == profile::phase_name(phase)) return phase;
  }
  throw ConfigError("phase: '" + name +
                    "' is not one of data_wait, h2d, forward, backward, comm_exposed, "
                    "tensor_comm, bubble, optimizer, other");
}

}  // namespace

void bind_profile(py::module_& m) {
  py::class_<train::StepAccounting>(m, "StepAccounting",
                                    "A script's steps accounted by phase, as loom train's.")
      .def(py::init([](const Config& config, const std::string& out_dir, train::DataStream* stream,
                       train::Job* job, const parallel::LayoutPlan* layout,
                       const std::string& model, int64_t parameters, const std::string& precision,
                       int64_t warmup_steps, int64_t tokens_per_sample) {
             train::StepAccountingOptions o;
             o.out_dir = out_dir;
             o.model = model;
             o.parameters = parameters;
             o.precision = precision;
             o.warmup_steps = warmup_steps;
             o.tokens_per_sample = tokens_per_sample;
             if (stream) {
               o.source = &stream->source();
               o.loader_threads = stream->loader_threads();
               o.loader_decodes = stream->decodes();
               // A Loom loader of token windows says how many tokens a sample is.
               if (tokens_per_sample == 0) o.tokens_per_sample = stream->tokens_per_sample();
             }
             if (job) {
               o.plan = job->plan;
               o.trainers = job->trainers();
               o.ranks_on_host = job->ranks_on_host();
             }
             // The layout the model's wrapper made of the job's ranks, where it made one.
             if (layout) o.plan = *layout;
             return std::make_unique<train::StepAccounting>(config, std::move(o));
           }),
           py::arg("config"), py::arg("out_dir"), py::arg("stream"), py::arg("job"),
           py::arg("layout"), py::arg("model"), py::arg("parameters"), py::arg("precision"),
           py::arg("warmup_steps"), py::arg("tokens_per_sample"), py::keep_alive<1, 4>(),
           py::keep_alive<1, 5>())
      .def("begin_step", &train::StepAccounting::begin_step)
      .def(
          "enter",
          [](train::StepAccounting& s, const std::string& phase) { s.enter(phase_named(phase)); },
          py::arg("phase"))
      .def("end_step", &train::StepAccounting::end_step, py::arg("replica_samples"),
           py::arg("loss"), py::arg("lr"), py::arg("epoch"),
           "Ends the step whose replica trained on `replica_samples` samples; the step's are "
           "the layout's replicas'.")
      .def_property_readonly("steps", &train::StepAccounting::steps)
      .def(
          "finish",
          [](train::StepAccounting& s) {
            const train::TrainSummary summary = s.finish();
            py::dict d;
            d["steps"] = summary.steps;
            d["samples_per_second"] = summary.samples_per_second;
            py::list findings;
            for (const auto& f : summary.findings) findings.append(f.id);
            d["findings"] = findings;
            return d;
          },
          "Writes summary.json (rank 0); returns the steps, rate and the advisor's finding ids.");
}

}  // namespace loom::python
