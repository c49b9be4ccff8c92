// A TorchScript module (exported from Python with torch.jit.script or trace) trained like any
// zoo model: its parameters are updated in place, its buffers checkpointed.
#pragma once

#include <memory>
#include <string>

#include "loom/models/model.h"

namespace loom::models {

// Throws ConfigError naming the path when the file is missing or not a TorchScript archive.
std::unique_ptr<Model> load_torchscript(const std::string& path);

}  // namespace loom::models
