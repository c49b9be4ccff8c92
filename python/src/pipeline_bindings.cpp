// ScriptPipeline for Python (train/script_pipeline.h): a script's own modules as the blocks of
// a pipeline, its loss function as the loss, each called back under the GIL while the schedule
// runs in C++ without it. loom.pipeline.Pipeline wraps it.
#include <ATen/CPUGeneratorImpl.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "loom/core/error.h"
#include "loom/models/block_chain_model.h"
#include "loom/train/script_pipeline.h"
#include "loom/train/step_accounting.h"

namespace loom::python {
namespace {

// A Python object that the schedule's thread may drop without holding the GIL.
std::shared_ptr<py::object> hold(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
}

at::Tensor one_tensor(const py::object& value, const std::string& what) {
  if (!THPVariable_Check(value.ptr())) {
    throw Error(what + " returned " + std::string(py::str(py::type::of(value).attr("__name__"))) +
                ", expected one tensor");
  }
  return THPVariable_Unpack(value.ptr());
}

// Block `name` of the chain: `module(x)` under the GIL.
models::Block python_block(const std::string& name, py::object module,
                           models::NamedTensors parameters, models::NamedTensors buffers) {
  models::Block block;
  block.name = name;
  block.parameters = std::move(parameters);
  block.buffers = std::move(buffers);
  if (module.is_none()) {  // another rank's stage, of which this rank knows nothing
    block.forward = [name](const at::Tensor&) -> at::Tensor {
      throw Error("pipeline: block '" + name + "' runs on another rank");
    };
    return block;
  }
  block.forward = [name, module = hold(std::move(module))](const at::Tensor& x) {
    py::gil_scoped_acquire gil;
    return one_tensor((*module)(x), "block '" + name + "'");
  };
  return block;
}

// The script's loss function, loss_fn(output, targets) -> a one-element tensor.
class PythonLoss : public models::Loss {
 public:
  explicit PythonLoss(py::object fn) : fn_(hold(std::move(fn))) {}
  at::Tensor operator()(const at::Tensor& output, const at::Tensor& targets,
                        models::Reduction) const override {
    py::gil_scoped_acquire gil;
    at::Tensor loss = one_tensor((*fn_)(output, targets), "loss_fn");
    if (loss.numel() != 1) {
      throw Error("loss_fn returned a tensor of shape " + c10::str(loss.sizes()) +
                  ", expected one element (reduce it, e.g. with .mean())");
    }
    return loss.reshape({});
  }

 private:
  std::shared_ptr<py::object> fn_;
};

py::list named_list(const models::NamedTensors& named) {
  py::list out;
  for (const auto& [name, t] : named) out.append(py::make_tuple(name, t));
  return out;
}

}  // namespace

void bind_pipeline(py::module_& m) {
  py::class_<train::ScriptPipeline>(m, "ScriptPipeline",
                                    "A script's modules as pipeline stages on the job's ranks.")
      .def(py::init([](train::Job& job, const std::string& name, const py::list& blocks,
                       const py::object& set_train, const py::object& loss_fn,
                       const std::string& schedule, int64_t microbatches, int pipeline_ranks,
                       int chunks, const std::vector<int>& split, double first_bucket_mb,
                       double bucket_cap_mb) {
             // blocks: (name, module or None, named parameters, named buffers) in forward order.
             std::vector<models::Block> chain;
             for (const py::handle item : blocks) {
               const auto t = item.cast<py::tuple>();
               chain.push_back(python_block(t[0].cast<std::string>(), t[1].cast<py::object>(),
                                            t[2].cast<models::NamedTensors>(),
                                            t[3].cast<models::NamedTensors>()));
             }
             std::function<void(bool)> train_mode;
             if (!set_train.is_none()) {
               train_mode = [fn = hold(set_train)](bool on) {
                 py::gil_scoped_acquire gil;
                 (*fn)(on);
               };
             }
             train::ScriptPipelineOptions o;
             o.schedule = schedule;
             o.microbatches = microbatches;
             o.pipeline_ranks = pipeline_ranks;
             o.chunks = chunks;
             o.split = split;
             o.data_parallel.buckets = parallel::bucket_limits(first_bucket_mb, bucket_cap_mb);
             auto model = std::make_unique<models::BlockChainModel>(name, std::move(chain),
                                                                    std::move(train_mode));
             auto loss = std::make_unique<PythonLoss>(loss_fn);
             py::gil_scoped_release release;  // joins the groups of P x D
             return std::make_unique<train::ScriptPipeline>(job, std::move(model), std::move(loss),
                                                            std::move(o));
           }),
           py::arg("job"), py::arg("name"), py::arg("blocks"), py::arg("set_train"),
           py::arg("loss_fn"), py::arg("schedule"), py::arg("microbatches"),
           py::arg("pipeline_ranks"), py::arg("chunks"), py::arg("split"),
           py::arg("first_bucket_mb"), py::arg("bucket_cap_mb"), py::keep_alive<1, 2>())
      .def(
          "step",
          [](train::ScriptPipeline& p, const std::optional<at::Tensor>& inputs,
             const std::optional<at::Tensor>& targets) {
            parallel::StepOutcome outcome;
            {
              py::gil_scoped_release release;  // the stages call back into Python
              outcome = p.step(inputs.value_or(at::Tensor()), targets.value_or(at::Tensor()));
            }
            const auto microbatches = static_cast<double>(p.plan().step.micro_batches);
            return py::make_tuple(outcome.loss_sum_value() / microbatches, outcome.samples);
          },
          py::arg("inputs"), py::arg("targets"),
          "One step of the schedule; returns (mean loss, samples) of this pipeline's step.")
      .def("clip_gradients", &train::ScriptPipeline::clip_gradients, py::arg("max_norm"),
           py::call_guard<py::gil_scoped_release>())
      .def("close", &train::ScriptPipeline::close, py::call_guard<py::gil_scoped_release>())
      .def(
          "account_in",
          [](train::ScriptPipeline& p, train::StepAccounting& steps) { p.set_phase_sink(&steps); },
          py::arg("steps"), py::keep_alive<1, 2>(),
          "`steps` hears the schedule's phases: forward, backward, bubble, comm_exposed.")
      .def_property_readonly("takes_part_in_checkpoints",
                             &train::ScriptPipeline::takes_part_in_checkpoints)
      .def(
          "gather",
          [](train::ScriptPipeline& p, const models::NamedTensors& model,
             const models::NamedTensors& optimizer) -> py::object {
            std::optional<parallel::CheckpointTensors> all;
            {
              py::gil_scoped_release release;  // the stages' tensors travel to the first rank
              // The generator's state goes along, as loom train's pipelines send theirs.
              parallel::CheckpointTensors mine;
              mine.model = model;
              mine.optimizer = optimizer;
              mine.rng = at::detail::getDefaultCPUGenerator().get_state();
              all = p.gather(std::move(mine));
            }
            if (!all) return py::none();
            return py::make_tuple(named_list(all->model), named_list(all->optimizer));
          },
          py::arg("model"), py::arg("optimizer"),
          "Every stage's tensors on the pipeline's first rank ((model, optimizer) lists); None "
          "on the others.")
      .def("manifest_json", &train::ScriptPipeline::manifest_json)
      .def("stop_accounting", [](train::ScriptPipeline& p) { p.set_phase_sink(nullptr); })
      .def("parameters", [](const train::ScriptPipeline& p) { return named_list(p.parameters()); })
      .def("buffers", [](const train::ScriptPipeline& p) { return named_list(p.buffers()); })
      .def_property_readonly("own_stages", &train::ScriptPipeline::own_stages)
      .def_property_readonly("stages", &train::ScriptPipeline::stages)
      .def_property_readonly("replica",
                             [](const train::ScriptPipeline& p) { return p.plan().data.replica; })
      .def_property_readonly("replicas",
                             [](const train::ScriptPipeline& p) { return p.plan().data.replicas; })
      .def_property_readonly("layout", &train::ScriptPipeline::plan,
                             "The job's ranks as data x pipeline (a loom.distributed.Layout).")
      .def_property_readonly("pipeline_rank",
                             [](const train::ScriptPipeline& p) { return p.plan().pipeline->rank; })
      .def_property_readonly("simulated_bubble", &train::ScriptPipeline::simulated_bubble)
      .def("describe", &train::ScriptPipeline::describe);
}

}  // namespace loom::python
