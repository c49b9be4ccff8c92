// Loom's C++ errors become Python exceptions of the same names and messages. pybind11 tries
// translators newest first, so the base class is registered before its subclasses.
#include "bindings.h"
#include "loom/core/error.h"

namespace loom::python {

void bind_errors(py::module_& m) {
  auto error = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  error.doc() = "Base of the errors Loom raises; the message names what, where and which rank.";
  py::register_exception<ConfigError>(m, "ConfigError", error).doc() =
      "The configuration or an argument is wrong; the message names the key.";
  py::register_exception<DataError>(m, "DataError", error).doc() =
      "Input data is missing, unreadable or malformed; the message names the path.";
  py::register_exception<CommError>(m, "CommError", error).doc() =
      "A collective or point-to-point operation failed; the message names the rank.";
  py::register_exception<TimeoutError>(m, "TimeoutError", error).doc() =
      "Something waited longer than its timeout; the message names who was waited for.";
}

}  // namespace loom::python
