// JPEG and PNG decoding with crop windows and DCT scaling, as the loader runs it on every file of
// a data set. Input: 8 bytes choosing the crop window and target size, then the image. A broken
// image must be a SampleError; a decoded one must lie within the image its header describes.
#include <ATen/ATen.h>

#include "fuzz_target.h"
#include "loom/data/image_codec.h"
#include "loom/data/sample_error.h"

LOOM_FUZZ_TARGET(image_decode) {
  if (size < 8) return;
  auto u16 = [&](int at) { return static_cast<int>(data[at] | (data[at + 1] << 8)); };
  loom::data::DecodeOptions options;
  // Odd first byte: the whole image; even: a window the loader's crop would ask for.
  if (data[0] & 1) {
    options.crop =
        loom::data::CropRect{u16(0) >> 9, u16(2) >> 9, (u16(4) >> 8) + 1, (u16(6) >> 8) + 1};
    options.target_width = data[5] & 63;
    options.target_height = data[7] & 63;
  }
  options.max_pixels = 1 << 22;  // as a loader's limit would, so a header cannot ask for 4 GB
  try {
    const auto image = loom::data::decode_image(data + 8, size - 8, options, "fuzz");
    const auto& pixels = image.pixels;
    if (pixels.dim() != 3 || pixels.size(2) != 3 || pixels.scalar_type() != at::kByte) {
      loom::fuzz::broken("a decoded image is not uint8 [H, W, 3]");
    }
    // Within the image, at the scale the decoder chose, and not empty.
    const auto header = loom::data::read_image_header(data + 8, size - 8, "fuzz");
    const int m = image.scale_eighths;
    const auto& r = image.region;
    if (pixels.size(0) < 1 || pixels.size(1) < 1 ||
        pixels.size(0) > (int64_t{header.height} * m + 7) / 8 ||
        pixels.size(1) > (int64_t{header.width} * m + 7) / 8 || r.x < 0 || r.y < 0 ||
        r.x + r.width > header.width || r.y + r.height > header.height) {
      loom::fuzz::broken("a decoded image lies outside its source or is empty");
    }
  } catch (const loom::data::SampleError&) {
  }
}
