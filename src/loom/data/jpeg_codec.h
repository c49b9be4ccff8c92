// JPEG through libjpeg-turbo's libjpeg API (which, unlike the TurboJPEG 2.x API, can decode a
// column window with jpeg_crop_scanline and skip rows with jpeg_skip_scanlines). Used by
// image_codec.cpp; see there for the contract.
#pragma once

#include "loom/data/image_codec.h"

namespace loom::data::jpeg {

ImageHeader read_header(const uint8_t* data, size_t size, const std::string& origin);
DecodedImage decode(const uint8_t* data, size_t size, const DecodeOptions& options,
                    const std::string& origin);
std::string encode(const at::Tensor& rgb, int quality);

}  // namespace loom::data::jpeg
