// Precompiled header: the LibTorch headers every Loom translation unit parses. Not included
// directly by any source file; CMake injects it.
//
// ATen alone: with torch/nn.h and torch/optim.h as well the header compiled to 565 MB, and
// loading it cost more than it saved (a file needing only ATen took 13.7 s with it, 7.8 s
// without any, 3.5 s with ATen's 268 MB alone; one using the nn API 14.4, 12.6 and 9.4 s).
// Files that use the C++ frontend include its headers themselves.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>
