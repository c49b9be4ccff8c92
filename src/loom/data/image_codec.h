// Decoding encoded images (JPEG through libjpeg-turbo, PNG through libpng) into uint8 RGB HWC
// tensors, with the two tricks that make a data pipeline fast: decode only the crop window that
// will be used, and let the JPEG decoder downscale in the DCT domain (by 1/2 or 1/4, or 1/8) as
// far as the crop stays at least the size it will be resized to. Grayscale and CMYK images come
// out as RGB.
//
// Errors are SampleErrors naming `origin` (usually the file path) and the reason. Thread-safe:
// every call uses its own decoder state.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace loom::data {

enum class ImageFormat { kJpeg, kPng };

struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0, height = 0;
  int channels = 0;  // as stored: 1 gray, 3 color, 4 CMYK or RGBA
};

struct CropRect {
  int x = 0, y = 0, width = 0, height = 0;  // in source pixels
};

// What to decode: a window of the image and the size it will be resized to, if any. When the
// window is larger than the target, JPEG decoding scales it by the smallest of 1/8, 2/8, 4/8
// that keeps it at least the target size.
struct DecodePlan {
  CropRect crop;  // clamped to the image
  int target_width = 0, target_height = 0;
};

struct DecodeOptions {
  std::optional<CropRect> crop;  // decode only this window (default: the whole image)
  int target_width = 0, target_height = 0;
  // Or: plan from the header, which the decoder reads anyway (one parse, not two). Replaces the
  // three fields above.
  std::function<DecodePlan(const ImageHeader&)> plan_from_header;
  int64_t max_pixels = 0;  // refuse images with more pixels (0 = no limit)
};

struct DecodedImage {
  at::Tensor pixels;      // uint8 [H, W, 3]
  CropRect region;        // the source region the pixels cover
  int scale_eighths = 8;  // the pixels are the region scaled by this many eighths
};

// The plan DecodeOptions asks for, its window clamped to the image. For the format decoders.
DecodePlan requested_plan(const DecodeOptions& options, const ImageHeader& header);
CropRect clamp_crop(const CropRect& crop, int width, int height);

// Reads dimensions without decoding. Throws SampleError.
ImageHeader read_image_header(const uint8_t* data, size_t size, const std::string& origin);

DecodedImage decode_image(const uint8_t* data, size_t size, const DecodeOptions& options,
                          const std::string& origin);

// Encodes uint8 [H, W, C] as a baseline JPEG: C = 3 RGB, 1 grayscale, 4 CMYK (Adobe-style,
// inverted as Photoshop writes it). For synthetic data sets and tests.
std::string encode_jpeg(const at::Tensor& pixels, int quality);

// Encodes uint8 [H, W, C] (C = 1 or 3) as PNG.
std::string encode_png(const at::Tensor& pixels);

}  // namespace loom::data
