// Precompiled header: the LibTorch headers every Loom translation unit parses. Not included
// directly by any source file; CMake injects it.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn.h>
#include <torch/optim.h>

#include <cstdint>
#include <string>
#include <vector>
