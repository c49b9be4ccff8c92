// PNG through libpng's simplified API. Used by image_codec.cpp; see there for the contract.
// PNG has no partial decode: crops are cut from the decoded image.
#pragma once

#include "loom/data/image_codec.h"

namespace loom::data::png {

ImageHeader read_header(const uint8_t* data, size_t size, const std::string& origin);
DecodedImage decode(const uint8_t* data, size_t size, const DecodeOptions& options,
                    const std::string& origin);
std::string encode(const at::Tensor& pixels);

}  // namespace loom::data::png
