// The parts of the `loom._loom` extension module, one function per area. Each binds Loom's C++
// API as it is: no logic here that the C++ API lacks (CONVENTIONS.md, "Contracts at the edges").
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/loader_state.h"

namespace loom::python {

namespace py = pybind11;

// loom.Error and its subclasses, raised for the C++ errors of the same names.
void bind_errors(py::module_& m);
// Config: parsed and validated from YAML text or a file, plus --set style overrides.
void bind_config(py::module_& m);
// DataStream: the training batches of a config, resumable (loom.data.Loader wraps it).
void bind_data(py::module_& m);
// train() and plan_costs(): the trainer and the cost planner.
void bind_train(py::module_& m);
// Job and ReplicaSync: the job a script's process is a rank of, and data parallelism for a
// user's own module (loom.distributed, loom.parallel).
void bind_parallel(py::module_& m);
// ReplicaSync: a user's own module's gradient exchange, with ZeRO (loom.parallel.DataParallel);
// bound by bind_parallel.
void bind_replica_sync(py::module_& m);
// TensorGroup: a script's own module's linears split over the job's tensor group
// (loom.parallel.TensorParallel).
void bind_tensor_parallel(py::module_& m);
// save_checkpoint() and load_checkpoint(): Loom's checkpoints for a script's own model.
void bind_checkpoint(py::module_& m);
// Tokenizer and TokenWindows: a `loom data tokenize` folder from Python (loom.data).
void bind_tokens(py::module_& m);
// ScriptPipeline: a script's modules as pipeline stages (loom.pipeline.Pipeline).
void bind_pipeline(py::module_& m);
// StepAccounting: a script's loop accounted by phase (loom.profile.Steps).
void bind_profile(py::module_& m);
// configure_runtime(): the process-wide choices `loom train` makes, for scripts that opt in.
void bind_runtime(py::module_& m);

// A loader's state as state_dict() gives it, and back (DataError naming what is missing).
py::dict loader_state_to_dict(const data::LoaderState& state);
data::LoaderState loader_state_from_dict(const py::dict& dict);

}  // namespace loom::python
