// Loom's C++ errors become Python exceptions of the same names, messages and fields: an error's
// `fields` (a dict of str: a configuration error's "key", a data error's "path" and "problem")
// and `key` (fields["key"], "" when none) are what a program reads instead of the message. The
// package's own Python code raises them the same way: loom.ConfigError("...", key="plan").
#include <exception>

#include "bindings.h"
#include "loom/core/error.h"

namespace loom::python {
namespace {

// The Python classes, made once at import; handles kept for the translator (never freed: the
// interpreter owns the classes until it ends).
struct ErrorClasses {
  PyObject* error = nullptr;
  PyObject* config = nullptr;
  PyObject* data = nullptr;
  PyObject* comm = nullptr;
  PyObject* timeout = nullptr;
};

ErrorClasses& classes() {
  static ErrorClasses c;
  return c;
}

PyObject* make_class(py::module_& m, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("loom.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // steals nothing: add_object increments
  return type;
}

// Raises the Python class `type` for `error`, its fields given as keyword arguments.
void raise(PyObject* type, const Error& error) {
  py::dict fields;
  for (const auto& [name, value] : error.fields()) fields[py::str(name)] = value;
  py::object instance = py::reinterpret_borrow<py::object>(type)(error.what(), **fields);
  PyErr_SetObject(type, instance.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  ErrorClasses& c = classes();
  c.error = make_class(m, "Error", PyExc_RuntimeError,
                       "Base of the errors Loom raises; the message names what, where and which "
                       "rank, and `fields` the same facts for a program.");
  c.config = make_class(m, "ConfigError", c.error,
                        "The configuration or an argument is wrong; `key` names it.");
  c.data = make_class(m, "DataError", c.error,
                      "Input data is missing, unreadable or malformed; fields['path'] names it.");
  c.comm = make_class(m, "CommError", c.error,
                      "A collective or point-to-point operation failed; the message names the "
                      "rank.");
  c.timeout = make_class(m, "TimeoutError", c.error,
                         "Something waited longer than its timeout; the message names who was "
                         "waited for.");
  py::handle error(c.error);
  // Every instance holds its fields, from C++ or from the keyword arguments a raise gives.
  error.attr("__init__") = py::cpp_function(
      [](py::handle self, py::object message, const py::kwargs& given) {
        py::handle(PyExc_RuntimeError).attr("__init__")(self, message);
        py::dict fields;
        for (const auto& [name, value] : given) fields[name] = py::str(value);
        self.attr("fields") = fields;
      },
      py::is_method(error), py::arg("message") = "");
  error.attr("key") =
      py::module_::import("builtins")
          .attr("property")(py::cpp_function([](py::handle self) {
                              py::dict fields = self.attr("fields");
                              return fields.contains("key") ? py::str(fields["key"]) : py::str("");
                            }),
                            py::none(), py::none(),
                            "The configuration key the error names; \"\" when "
                            "none.");

  // Tried newest first: before pybind11's own translators, which would lose the fields.
  py::register_exception_translator([](std::exception_ptr thrown) {
    if (!thrown) return;
    const ErrorClasses& types = classes();
    try {
      std::rethrow_exception(thrown);
    } catch (const ConfigError& e) {
      raise(types.config, e);
    } catch (const DataError& e) {
      raise(types.data, e);
    } catch (const CommError& e) {
      raise(types.comm, e);
    } catch (const TimeoutError& e) {
      raise(types.timeout, e);
    } catch (const Error& e) {
      raise(types.error, e);
    }
  });
}

}  // namespace loom::python
