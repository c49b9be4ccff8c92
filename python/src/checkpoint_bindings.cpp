// save_checkpoint() and load_checkpoint() for Python: Loom's atomic checkpoints (safetensors and
// a manifest, train/checkpoint.h) of a script's own model, optimizer state and loader position,
// the tensors shared with PyTorch, and the names checkpoints give optimizer state
// (train/optimizer.h); CheckpointWriter, the same written in the background
// (train/async_checkpoint_writer.h), and agree_on_checkpoint (train/checkpoint_agreement.h).
// loom.checkpoint wraps them.
#include <ATen/CPUGeneratorImpl.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "loom/core/error.h"
#include "loom/core/settings.h"
#include "loom/train/async_checkpoint_writer.h"
#include "loom/train/checkpoint.h"
#include "loom/train/checkpoint_agreement.h"
#include "loom/train/job.h"
#include "loom/train/optimizer.h"

namespace loom::python {
namespace {

py::dict named_to_dict(const models::NamedTensors& named) {
  py::dict d;
  for (const auto& [name, t] : named) d[py::str(name)] = t;
  return d;
}

// What a script's save holds, as CheckpointStore writes it.
train::CheckpointData checkpoint_data(int64_t step, int64_t epoch, int64_t step_in_epoch,
                                      int64_t samples, const models::NamedTensors& model,
                                      const models::NamedTensors& optimizer,
                                      const std::string& optimizer_kind, const py::object& loader,
                                      const std::string& extra_json,
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
  return data;
}

// The store of DIR as a script's saves open it: with the testing aids, and cleared of what a
// killed save left behind.
std::unique_ptr<train::CheckpointStore> open_store(const std::string& dir, int64_t keep) {
  auto store = std::make_unique<train::CheckpointStore>(
      dir, keep, setting_int("LOOM_FAULT_KILL_IN_SAVE"), setting_int("LOOM_FAULT_SLOW_SAVE_MS"));
  store->remove_unfinished();
  return store;
}

// A store and its background writer, for loom.checkpoint.save(..., blocking=False): one per
// directory, kept by loom.checkpoint so that its host buffers serve every checkpoint.
struct BackgroundSaves {
  BackgroundSaves(const std::string& dir, int64_t keep)
      : store(open_store(dir, keep)), writer(*store) {}
  std::unique_ptr<train::CheckpointStore> store;
  train::AsyncCheckpointWriter writer;  // destroyed first: it waits for the write in flight
};

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
        const train::CheckpointData data =
            checkpoint_data(step, epoch, step_in_epoch, samples, model, optimizer, optimizer_kind,
                            loader, extra_json, layout_json);
        py::gil_scoped_release release;
        return open_store(dir, keep)->save(data);
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

  py::class_<BackgroundSaves>(m, "CheckpointWriter",
                              "Checkpoints of DIR written and committed by a thread of their own "
                              "from host buffers kept between checkpoints.")
      .def(py::init<const std::string&, int64_t>(), py::arg("dir"), py::arg("keep"))
      .def(
          "start",
          [](BackgroundSaves& saves, int64_t step, int64_t epoch, int64_t step_in_epoch,
             int64_t samples, const models::NamedTensors& model,
             const models::NamedTensors& optimizer, const std::string& optimizer_kind,
             const py::object& loader, const std::string& extra_json,
             const std::string& layout_json) {
            train::CheckpointData data =
                checkpoint_data(step, epoch, step_in_epoch, samples, model, optimizer,
                                optimizer_kind, loader, extra_json, layout_json);
            py::gil_scoped_release release;
            saves.writer.start(std::move(data));
          },
          py::arg("step"), py::arg("epoch"), py::arg("step_in_epoch"), py::arg("samples"),
          py::arg("model"), py::arg("optimizer"), py::arg("optimizer_kind"), py::arg("loader"),
          py::arg("extra_json"), py::arg("layout_json"),
          "Copies the checkpoint into the host buffers and starts writing it; returns once "
          "copied. Raises loom.Error while the previous write's outcome is not taken.")
      .def(
          "wait",
          [](BackgroundSaves& saves) -> py::object {
            std::optional<train::AsyncWriteResult> result;
            {
              py::gil_scoped_release release;
              result = saves.writer.wait();
            }
            if (!result) return py::none();
            py::dict d;
            d["step"] = result->step;
            d["path"] = result->path;
            d["error"] = result->error;
            d["background_seconds"] = result->background_seconds;
            return d;
          },
          "Waits for the write in flight: {step, path, error ('' when committed), "
          "background_seconds}, or None when none was started.")
      .def_property_readonly("running",
                             [](const BackgroundSaves& saves) { return saves.writer.running(); })
      .def_property_readonly(
          "buffer_bytes", [](const BackgroundSaves& saves) { return saves.writer.buffer_bytes(); })
      .def_property_readonly("buffer_allocations", [](const BackgroundSaves& saves) {
        return saves.writer.buffer_allocations();
      });
  m.def(
      "agree_on_checkpoint",
      [](train::Job& job, int64_t step, bool failed_here) {
        if (comm::Communicator* trainers = job.trainers()) {
          train::agree_on_checkpoint(*trainers, step, failed_here);
        }
      },
      py::arg("job"), py::arg("step"), py::arg("failed_here"),
      py::call_guard<py::gil_scoped_release>(),
      "Collective over the job's training ranks after a checkpoint: returns once every rank "
      "is done with its part; raises loom.Error on the others when a rank's part failed.");
}

}  // namespace loom::python
