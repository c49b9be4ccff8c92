// The process-wide settings `loom train` makes for itself, for a script that opts in: importing
// loom makes none of them.
#include <ATen/Parallel.h>

#include "bindings.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/topology.h"

namespace loom::python {

void bind_runtime(py::module_& m) {
  m.def(
      "usable_cores", [] { return detect_topology().usable_cores; },
      "Cores this process may use: its affinity mask and cgroup CPU quota.");
  m.def(
      "set_allocator",
      [](const std::string& allocator) {
        if (allocator != "caching" && allocator != "system") {
          throw ConfigError("allocator: expected caching or system, got '" + allocator + "'");
        }
        use_configured_allocator(allocator, detect_topology().memory_bytes);
      },
      py::arg("allocator"), "runtime.allocator of `loom train`, for this whole process.");
  m.def(
      "caching_allocator_installed", [] { return installed_caching_cpu_allocator() != nullptr; },
      "Whether Loom's caching CPU allocator is LibTorch's CPU allocator in this process.");
  m.def(
      "set_threads",
      [](int threads) {
        if (threads < 1) {
          throw ConfigError("threads: expected a count >= 1 or 'auto', got " +
                            std::to_string(threads));
        }
        at::set_num_threads(threads);
      },
      py::arg("threads"), "LibTorch's intra-op threads, for this whole process.");
}

}  // namespace loom::python
