// The LibTorch this build of Loom compiled and linked against, as its package names it, for
// `loom version` and summary.json: a run records the torch it ran on.
#pragma once

#include <string>

namespace loom {

struct TorchBuild {
  std::string version;  // "2.11.0+cu130" (a wheel's __version__, a LibTorch's build-version)
  std::string cuda;     // the CUDA the package was built for ("13.0"), "" for a CPU build
};

// Fixed when Loom was configured (cmake/LoomTorch.cmake).
const TorchBuild& torch_build();

}  // namespace loom
