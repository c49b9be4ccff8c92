#include <pybind11/stl.h>

#include "bindings.h"
#include "loom/data/transform_registry.h"

namespace loom::python {

void bind_config(py::module_& m) {
  py::class_<Config>(m, "Config", "A validated `loom train` configuration.")
      .def_static(
          "from_text",
          [](const std::string& yaml, const std::string& origin,
             const std::vector<std::string>& overrides) {
            return data::complete_transforms(parse_config(yaml, origin, overrides));
          },
          py::arg("yaml"), py::arg("origin"), py::arg("overrides"),
          "YAML text (JSON is YAML too) plus 'key=value' overrides; raises ConfigError naming "
          "the key.")
      .def_static(
          "from_files",
          [](const std::vector<std::string>& paths, const std::vector<std::string>& overrides) {
            return data::complete_transforms(load_config(paths, overrides));
          },
          py::arg("paths"), py::arg("overrides"),
          "YAML files, later keys replacing earlier ones, plus 'key=value' overrides.")
      .def("to_yaml", &config_to_yaml, "Every key, resolved, as YAML.")
      .def("to_json", &config_to_json, "Every key, resolved, as JSON text.");
}

}  // namespace loom::python
