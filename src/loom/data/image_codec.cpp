#include "loom/data/image_codec.h"

#include <algorithm>
#include <cstring>

#include "loom/data/jpeg_codec.h"
#include "loom/data/png_codec.h"
#include "loom/data/sample_error.h"

namespace loom::data {
namespace {

ImageFormat sniff(const uint8_t* data, size_t size, const std::string& origin) {
  if (size == 0) throw SampleError(SampleFault::kTruncated, "image '" + origin + "' is empty");
  static const uint8_t kJpeg[] = {0xFF, 0xD8, 0xFF};
  static const uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= sizeof kJpeg && std::memcmp(data, kJpeg, sizeof kJpeg) == 0)
    return ImageFormat::kJpeg;
  if (size >= sizeof kPng && std::memcmp(data, kPng, sizeof kPng) == 0) return ImageFormat::kPng;
  if (size < sizeof kPng) {
    throw SampleError(SampleFault::kTruncated,
                      "image '" + origin + "' has only " + std::to_string(size) + " bytes");
  }
  throw SampleError(SampleFault::kUndecodable,
                    "image '" + origin + "' is neither JPEG nor PNG (wrong magic bytes)");
}

}  // namespace

DecodePlan requested_plan(const DecodeOptions& options, const ImageHeader& header) {
  DecodePlan plan;
  if (options.plan_from_header) {
    plan = options.plan_from_header(header);
  } else {
    plan.crop = options.crop.value_or(CropRect{0, 0, header.width, header.height});
    plan.target_width = options.target_width;
    plan.target_height = options.target_height;
  }
  plan.crop = clamp_crop(plan.crop, header.width, header.height);
  return plan;
}

CropRect clamp_crop(const CropRect& crop, int width, int height) {
  CropRect c;
  c.x = std::clamp(crop.x, 0, width - 1);
  c.y = std::clamp(crop.y, 0, height - 1);
  c.width = std::clamp(crop.width, 1, width - c.x);
  c.height = std::clamp(crop.height, 1, height - c.y);
  return c;
}

ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& origin) {
  return sniff(data, size, origin) == ImageFormat::kJpeg ? jpeg::read_header(data, size, origin)
                                                         : png::read_header(data, size, origin);
}

DecodedImage decode_image(const uint8_t* data, size_t size, const DecodeOptions& options,
                          const std::string& origin) {
  return sniff(data, size, origin) == ImageFormat::kJpeg ? jpeg::decode(data, size, options, origin)
                                                         : png::decode(data, size, options, origin);
}

std::string encode_jpeg(const at::Tensor& rgb, int quality) { return jpeg::encode(rgb, quality); }

std::string encode_png(const at::Tensor& pixels) { return png::encode(pixels); }

}  // namespace loom::data
