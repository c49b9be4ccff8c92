// IDX files (the MNIST family's format), raw or gzip-compressed.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "loom/data/image_set.h"

namespace loom::data {

// Reads one IDX file (uint8 payload) into a tensor shaped by the file's dimensions.
// Throws DataError naming the path for a missing, truncated or malformed file.
at::Tensor read_idx(const std::string& path);

// Loads `<dir>/<split>-images-idx3-ubyte[.gz]` and `<dir>/<split>-labels-idx1-ubyte[.gz]`;
// split is "train" or "t10k". `package_hint` names what to install when the folder is missing.
ImageSet load_idx_split(const std::string& dir, const std::string& split,
                        const std::string& package_hint);

}  // namespace loom::data
