// `loom._loom`: the extension module under the `loom` Python package. Importing it changes
// nothing process-wide (no allocator, thread or signal settings): that is loom.runtime's job,
// and only when a script asks.
#include "bindings.h"

#ifndef LOOM_VERSION
#define LOOM_VERSION "unknown"
#endif

PYBIND11_MODULE(_loom, m) {
  m.doc() = "Loom's C++ engine; use the `loom` package, not this module.";
  m.attr("__version__") = LOOM_VERSION;
  loom::python::bind_errors(m);
  loom::python::bind_config(m);
  loom::python::bind_data(m);
  loom::python::bind_tokens(m);
  loom::python::bind_train(m);
  loom::python::bind_parallel(m);
  loom::python::bind_tensor_parallel(m);
  loom::python::bind_checkpoint(m);
  loom::python::bind_pipeline(m);
  loom::python::bind_profile(m);
  loom::python::bind_runtime(m);
}
