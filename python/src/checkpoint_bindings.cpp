// save_checkpoint() and load_checkpoint() for Python: Loom's atomic checkpoints (safetensors and
// a manifest, train/checkpoint.h) of a script's own model, optimizer state and loader position,
// the tensors shared with PyTorch, and the names checkpoints give optimizer state
// (train/optimizer.h). loom.checkpoint wraps them.
#include <ATen/CPUGeneratorImpl.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "loom/core/error.h"
#include "loom/core/settings.h"
#include "loom/train/checkpoint.h"
#include "loom/train/optimizer.h"

namespace loom::python {
namespace {

py::dict named_to_dict(const models::NamedTensors& named) {
  py::dict d;
  for (const auto& [name, t] : named) d[py::str(name)] = t;
  return d;
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  m.def("optimizer_kinds", &train::optimizer_kinds,
        "The optimizers whose state checkpoints keep, by optimizer.name.");
  m.def("name_optimizer_state", &train::name_optimizer_state, py::arg("kind"), py::arg("state"),
        "[(parameter, [(field, tensor)])] under a checkpoint's names (<parameter>.<field>).");
  m.def("split_optimizer_state", &train::split_optimizer_state, py::arg("kind"), py::arg("state"),
        "A checkpoint's optimizer state as [(parameter, [(field, tensor)])].");
  m.def(
      "save_checkpoint",
      [](const std::string& dir, int64_t keep, int64_t step, int64_t epoch, int64_t step_in_epoch,
         int64_t samples, const models::NamedTensors& model, const models::NamedTensors& optimizer,
         const std::string& optimizer_kind, const py::object& loader, const std::string& extra_json,
         const std::string& layout_json) {
        train::CheckpointData data;
        data.position = {step, epoch, step_in_epoch, samples};
        if (!loader.is_none()) data.loader = loader_state_from_dict(loader.cast<py::dict>());
        data.model = model;
        data.optimizer = optimizer;
        data.optimizer_kind = optimizer_kind;
        data.rng_state = at::detail::getDefaultCPUGenerator().get_state();
        data.layout_json = layout_json;
        data.config_json = "{}";
        data.extra_json = extra_json;
        py::gil_scoped_release release;
        train::CheckpointStore store(dir, keep, setting_int("LOOM_FAULT_KILL_IN_SAVE"));
        store.remove_unfinished();  // what a save killed before left behind
        return store.save(data);
      },
      py::arg("dir"), py::arg("keep"), py::arg("step"), py::arg("epoch"), py::arg("step_in_epoch"),
      py::arg("samples"), py::arg("model"), py::arg("optimizer"), py::arg("optimizer_kind"),
      py::arg("loader"), py::arg("extra_json"), py::arg("layout_json"),
      "Commits a checkpoint DIR/step-<STEP> atomically and returns its path.");
  m.def(
      "load_checkpoint",
      [](const std::string& dir) {
        std::optional<std::string> path;
        {
          py::gil_scoped_release release;
          path = train::CheckpointStore(dir, 0).latest();
        }
        if (!path) throw DataError("checkpoint: no committed checkpoint in '" + dir + "'");
        const train::CheckpointData data = train::CheckpointStore::load(*path);
        py::dict d;
        d["path"] = *path;
        d["step"] = data.position.step;
        d["epoch"] = data.position.epoch;
        d["step_in_epoch"] = data.position.step_in_epoch;
        d["samples"] = data.position.samples;
        d["model"] = named_to_dict(data.model);
        d["optimizer"] = named_to_dict(data.optimizer);
        d["optimizer_kind"] = data.optimizer_kind;
        d["loader"] = data.loader ? py::object(loader_state_to_dict(*data.loader)) : py::none();
        d["rng"] = data.rng_state;
        d["extra_json"] = data.extra_json;
        d["layout_json"] = data.layout_json;
        return d;
      },
      py::arg("dir"), "The newest committed checkpoint of DIR (its `latest`).");
}

}  // namespace loom::python
