#include "loom/data/image_codec.h"

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
