// ResNet-18 and ResNet-50 with torchvision's architecture, parameter names and initialisation
// (v1.5: the stride sits on the 3x3 convolution of a bottleneck). With 3 channels and 1000
// classes they have 11,689,512 and 25,557,032 parameters.
#pragma once

#include "loom/models/module_model.h"

namespace loom::models {

std::shared_ptr<ZooNetwork> make_resnet(const InputSpec& input, int depth);  // 18 or 50

}  // namespace loom::models
