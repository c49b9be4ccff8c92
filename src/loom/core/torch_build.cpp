#include "loom/core/torch_build.h"

namespace loom {

const TorchBuild& torch_build() {
  static const TorchBuild build{LOOM_TORCH_BUILD, LOOM_TORCH_CUDA};
  return build;
}

}  // namespace loom
