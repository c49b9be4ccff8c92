#include "loom/data/png_codec.h"

#include <png.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "loom/data/sample_error.h"

namespace loom::data::png {
namespace {

// png_image_free on every path out.
struct ImageGuard {
  png_image image;
  ImageGuard() {
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
  }
  ~ImageGuard() { png_image_free(&image); }
};

[[noreturn]] void fail(const png_image& image, const std::string& origin) {
  const std::string message = image.message;
  // libpng's words for a stream that ends early.
  bool truncated = false;
  for (const char* words : {"beyond end of data", "Read Error", "ot enough image data"}) {
    truncated = truncated || message.find(words) != std::string::npos;
  }
  throw SampleError(truncated ? SampleFault::kTruncated : SampleFault::kUndecodable,
                    "PNG '" + origin + "': " + message);
}

int stored_channels(png_uint_32 format) {
  return static_cast<int>(PNG_IMAGE_SAMPLE_CHANNELS(format));
}

}  // namespace

ImageHeader read_header(const uint8_t* data, size_t size, const std::string& origin) {
  ImageGuard g;
  if (!png_image_begin_read_from_memory(&g.image, data, size)) fail(g.image, origin);
  return {ImageFormat::kPng, static_cast<int>(g.image.width), static_cast<int>(g.image.height),
          stored_channels(g.image.format)};
}

DecodedImage decode(const uint8_t* data, size_t size, const DecodeOptions& options,
                    const std::string& origin) {
  ImageGuard g;
  if (!png_image_begin_read_from_memory(&g.image, data, size)) fail(g.image, origin);
  const int width = static_cast<int>(g.image.width), height = static_cast<int>(g.image.height);
  if (options.max_pixels > 0 && int64_t{width} * height > options.max_pixels) {
    throw SampleError(SampleFault::kTooLarge, "PNG '" + origin + "': " + std::to_string(width) +
                                                  "x" + std::to_string(height) +
                                                  " pixels exceed the limit of " +
                                                  std::to_string(options.max_pixels));
  }
  g.image.format = PNG_FORMAT_RGB;  // gray expands, alpha is composited on black
  at::Tensor full = at::empty({height, width, 3}, at::kByte);
  if (!png_image_finish_read(&g.image, nullptr, full.data_ptr<uint8_t>(), 0, nullptr)) {
    fail(g.image, origin);
  }
  DecodedImage result;
  result.region = {0, 0, width, height};
  const ImageHeader header{ImageFormat::kPng, width, height, stored_channels(g.image.format)};
  const CropRect c = requested_plan(options, header).crop;
  if (c.width != width || c.height != height) {
    full = full.slice(0, c.y, c.y + c.height).slice(1, c.x, c.x + c.width).contiguous();
    result.region = c;
  }
  result.pixels = full;
  return result;
}

std::string encode(const at::Tensor& pixels) {
  at::Tensor p = pixels.contiguous();
  ImageGuard g;
  g.image.width = static_cast<png_uint_32>(p.size(1));
  g.image.height = static_cast<png_uint_32>(p.size(0));
  g.image.format = p.size(2) == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&g.image, nullptr, &size, 0, p.data_ptr<uint8_t>(), 0, nullptr)) {
    throw Error(std::string("PNG encode failed: ") + g.image.message);
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&g.image, out.data(), &size, 0, p.data_ptr<uint8_t>(), 0,
                                 nullptr)) {
    throw Error(std::string("PNG encode failed: ") + g.image.message);
  }
  out.resize(size);
  return out;
}

}  // namespace loom::data::png
