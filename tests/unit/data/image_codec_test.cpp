#include "loom/data/image_codec.h"

#include <gtest/gtest.h>

#include "loom/data/sample_error.h"

namespace loom::data {
namespace {

// A smooth colour image (JPEG-friendly, so lossy error stays small and predictable).
at::Tensor smooth_image(int64_t h, int64_t w) {
  at::Tensor y = at::arange(h, at::kFloat).view({h, 1, 1}).expand({h, w, 1});
  at::Tensor x = at::arange(w, at::kFloat).view({1, w, 1}).expand({h, w, 1});
  at::Tensor r = 128 + 100 * at::sin(x / 23.0);
  at::Tensor g = 128 + 100 * at::cos(y / 31.0);
  at::Tensor b = (x + y) * (255.0 / double(h + w));
  return at::cat({r, g, b}, 2).round().clamp(0, 255).to(at::kByte).contiguous();
}

DecodedImage decode(const std::string& bytes, const DecodeOptions& options = {}) {
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options,
                      "test");
}

double mean_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().mean().item<double>();
}

SampleFault fault_of(const std::string& bytes, const DecodeOptions& options = {}) {
  try {
    decode(bytes, options);
  } catch (const SampleError& e) {
    return e.fault();
  }
  ADD_FAILURE() << "decoded without error";
  return SampleFault::kUnreadable;
}

TEST(ImageCodec, JpegDecodesToReferencePixelsWithinCodecTolerance) {
  at::Tensor original = smooth_image(120, 160);
  std::string bytes = encode_jpeg(original, 95);
  ImageHeader header =
      read_image_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test");
  EXPECT_EQ(header.format, ImageFormat::kJpeg);
  EXPECT_EQ(header.width, 160);
  EXPECT_EQ(header.height, 120);
  DecodedImage d = decode(bytes);
  ASSERT_EQ(d.pixels.sizes(), original.sizes());
  EXPECT_LT(mean_abs_diff(d.pixels, original), 2.0);  // quality 95 on a smooth image
  EXPECT_EQ(d.scale_eighths, 8);
}

TEST(ImageCodec, CropWindowMatchesTheSameWindowOfAFullDecode) {
  std::string bytes = encode_jpeg(smooth_image(200, 300), 90);
  at::Tensor full = decode(bytes).pixels;
  DecodeOptions options;
  options.crop = CropRect{37, 21, 150, 101};
  DecodedImage d = decode(bytes, options);
  EXPECT_EQ(d.region.x, 37);
  EXPECT_EQ(d.region.y, 21);
  ASSERT_EQ(d.pixels.sizes(), (at::IntArrayRef{101, 150, 3}));
  at::Tensor reference = full.slice(0, 21, 122).slice(1, 37, 187);
  // Identical inside; chroma upsampling at the window's edges may differ by a few levels.
  at::Tensor inner = d.pixels.slice(0, 2, -2).slice(1, 2, -2);
  EXPECT_TRUE(inner.equal(reference.slice(0, 2, -2).slice(1, 2, -2)));
  EXPECT_LT(mean_abs_diff(d.pixels, reference), 0.5);
}

TEST(ImageCodec, DctScalingAsFarAsTheCropStaysAtLeastTheTarget) {
  std::string bytes = encode_jpeg(smooth_image(256, 256), 90);
  DecodeOptions options;
  options.target_width = options.target_height = 60;  // 256/4 = 64 >= 60, 256/8 = 32 < 60
  DecodedImage d = decode(bytes, options);
  EXPECT_EQ(d.scale_eighths, 2);
  ASSERT_EQ(d.pixels.sizes(), (at::IntArrayRef{64, 64, 3}));
  // The DCT-domain downscale approximates a 4x4 box average of the full image.
  at::Tensor full = decode(bytes).pixels.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  at::Tensor pooled = at::avg_pool2d(full, {4, 4}).squeeze(0).permute({1, 2, 0});
  EXPECT_LT(mean_abs_diff(d.pixels, pooled), 2.0);

  options.target_width = options.target_height = 100;  // 256 * 4/8 = 128 >= 100
  EXPECT_EQ(decode(bytes, options).scale_eighths, 4);
  options.target_width = options.target_height = 200;  // 128 < 200: no scaling
  EXPECT_EQ(decode(bytes, options).scale_eighths, 8);
  // The region a scaled crop covers is reported in source pixels.
  options.target_width = options.target_height = 50;
  options.crop = CropRect{40, 24, 120, 200};  // 4/8 keeps 60 x 100
  DecodedImage cropped = decode(bytes, options);
  EXPECT_EQ(cropped.scale_eighths, 4);
  EXPECT_EQ(cropped.pixels.sizes(), (at::IntArrayRef{100, 60, 3}));
  EXPECT_EQ(cropped.region.x, 40);
  EXPECT_EQ(cropped.region.y, 24);
  EXPECT_EQ(cropped.region.width, 120);
  EXPECT_EQ(cropped.region.height, 200);
}

TEST(ImageCodec, GrayscaleAndCmykBecomeRgb) {
  at::Tensor gray = smooth_image(64, 64).select(2, 1).unsqueeze(2).contiguous();
  DecodedImage g = decode(encode_jpeg(gray, 95));
  ASSERT_EQ(g.pixels.size(2), 3);
  EXPECT_TRUE(g.pixels.select(2, 0).equal(g.pixels.select(2, 2)));
  EXPECT_LT(mean_abs_diff(g.pixels.select(2, 0), gray.squeeze(2)), 2.0);

  // Adobe CMYK as Photoshop writes it (inverted): stored (255, 128, 0, 255) is RGB (255, 128, 0).
  at::Tensor cmyk = at::tensor({255, 128, 0, 255}, at::kByte).view({1, 1, 4}).expand({16, 16, 4});
  DecodedImage c = decode(encode_jpeg(cmyk.contiguous(), 100));
  ASSERT_EQ(c.pixels.sizes(), (at::IntArrayRef{16, 16, 3}));
  at::Tensor expected = at::tensor({255, 128, 0}, at::kByte).view({1, 1, 3}).expand({16, 16, 3});
  EXPECT_LT(mean_abs_diff(c.pixels, expected), 3.0);
}

TEST(ImageCodec, PngIsLosslessAndCropsExactly) {
  at::Tensor original = smooth_image(50, 70);
  std::string bytes = encode_png(original);
  EXPECT_TRUE(decode(bytes).pixels.equal(original));
  DecodeOptions options;
  options.crop = CropRect{10, 5, 20, 30};
  EXPECT_TRUE(decode(bytes, options).pixels.equal(original.slice(0, 5, 35).slice(1, 10, 30)));
  at::Tensor gray = original.select(2, 0).unsqueeze(2).contiguous();
  at::Tensor rgb = decode(encode_png(gray)).pixels;
  EXPECT_TRUE(rgb.select(2, 1).equal(gray.squeeze(2)));
}

TEST(ImageCodec, EveryKindOfBadFileIsASampleErrorWithItsReason) {
  const std::string jpeg = encode_jpeg(smooth_image(64, 64), 90);
  const std::string png = encode_png(smooth_image(64, 64));
  EXPECT_EQ(fault_of(""), SampleFault::kTruncated);
  EXPECT_EQ(fault_of("\xFF\xD8"), SampleFault::kTruncated);
  EXPECT_EQ(fault_of("GIF89a, not a JPEG at all"), SampleFault::kUndecodable);
  EXPECT_EQ(fault_of(jpeg.substr(0, jpeg.size() / 2)), SampleFault::kTruncated);
  EXPECT_EQ(fault_of(png.substr(0, png.size() / 2)), SampleFault::kTruncated);
  // A corrupt header: the frame claims zero colour components.
  std::string corrupt = jpeg;
  const size_t frame = corrupt.find("\xFF\xC0");
  ASSERT_NE(frame, std::string::npos);
  corrupt[frame + 9] = 0;
  EXPECT_EQ(fault_of(corrupt), SampleFault::kUndecodable);

  // A decompression bomb: a header claiming 30000x30000 pixels is refused before decoding.
  std::string bomb = jpeg;
  for (size_t at : {frame + 5, frame + 7}) {  // height, then width, big-endian
    bomb[at] = static_cast<char>(30000 >> 8);
    bomb[at + 1] = static_cast<char>(30000 & 0xFF);
  }
  DecodeOptions limit;
  limit.max_pixels = 100'000'000;
  EXPECT_EQ(fault_of(bomb, limit), SampleFault::kTooLarge);
}

TEST(ImageCodec, ErrorsNameTheOrigin) {
  try {
    decode_image(reinterpret_cast<const uint8_t*>("nope nope"), 9, {}, "/data/cat/1.jpg");
    FAIL();
  } catch (const SampleError& e) {
    EXPECT_STREQ(e.what(), "image '/data/cat/1.jpg' is neither JPEG nor PNG (wrong magic bytes)");
    EXPECT_STREQ(fault_name(e.fault()), "undecodable");
  }
}

}  // namespace
}  // namespace loom::data
