#include "loom/data/jpeg_codec.h"

// clang-format off
#include <cstdio>   // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <vector>

#include "loom/data/sample_error.h"

namespace loom::data::jpeg {
namespace {

// DCT scalings tried, smallest first, in eighths. Only powers of two: libjpeg-turbo has SIMD
// inverse DCTs for 2x2, 4x4 and 8x8, and the other sizes measured no faster (bench/RESULTS.md).
constexpr int kScaleEighths[] = {1, 2, 4};

// libjpeg reports errors through callbacks; we longjmp back to the guarded call and turn the
// message into a SampleError there. A premature end of data and corrupt entropy-coded data are
// only warnings to libjpeg (it pads with gray or resyncs), but for training data they mean a
// truncated or damaged file, so they are fatal here.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings that mean the entropy-coded data is damaged: libjpeg would carry on and hand back
// garbage pixels, which must not reach training.
bool is_corruption(int code) {
  switch (code) {
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_EXTRANEOUS_DATA:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
      return true;
    default:
      return false;
  }
}

void on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  if (level == -1 && (code == JWRN_JPEG_EOF || is_corruption(code))) {
    e->truncated = code == JWRN_JPEG_EOF;
    (*cinfo->err->format_message)(cinfo, e->message);
    std::longjmp(e->jump, 1);
  }
}

// Owns a decompressor. The guarded_* functions below hold only plain data, because a longjmp
// out of libjpeg skips C++ destructors between the setjmp and the error.
struct Decoder {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  Decoder() {
    std::memset(&err, 0, sizeof err);
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    jpeg_create_decompress(&cinfo);
  }
  ~Decoder() { jpeg_destroy_decompress(&cinfo); }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
};

// Where to decode, in scaled output coordinates.
struct Window {
  JDIMENSION x, y, width, height;
};

bool guarded_read_header(Decoder& d, const uint8_t* data, size_t size) {
  if (setjmp(d.err.jump)) return false;
  jpeg_mem_src(&d.cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo, TRUE);
  return true;
}

bool guarded_plan(Decoder& d, int eighths, J_COLOR_SPACE out_space) {
  if (setjmp(d.err.jump)) return false;
  d.cinfo.scale_num = static_cast<unsigned>(eighths);
  d.cinfo.scale_denom = 8;
  d.cinfo.out_color_space = out_space;
  jpeg_calc_output_dimensions(&d.cinfo);
  return true;
}

bool guarded_decode(Decoder& d, Window w, uint8_t* row, uint8_t* out) {
  if (setjmp(d.err.jump)) return false;
  jpeg_start_decompress(&d.cinfo);
  const int comps = d.cinfo.output_components;
  // jpeg_crop_scanline widens the window to iMCU boundaries; remember where ours starts in it.
  JDIMENSION crop_x = w.x, crop_width = w.width;
  if (w.x > 0 || w.width < d.cinfo.output_width) {
    jpeg_crop_scanline(&d.cinfo, &crop_x, &crop_width);
  }
  const size_t skip = static_cast<size_t>(w.x - crop_x) * comps;
  if (w.y > 0) jpeg_skip_scanlines(&d.cinfo, w.y);
  for (JDIMENSION r = 0; r < w.height; ++r) {
    JSAMPROW rows[1] = {row};
    jpeg_read_scanlines(&d.cinfo, rows, 1);
    std::memcpy(out + static_cast<size_t>(r) * w.width * comps, row + skip,
                static_cast<size_t>(w.width) * comps);
  }
  jpeg_abort_decompress(&d.cinfo);  // the rows below the window are not needed
  return true;
}

[[noreturn]] void fail(const Decoder& d, const std::string& origin) {
  throw SampleError(d.err.truncated ? SampleFault::kTruncated : SampleFault::kUndecodable,
                    "JPEG '" + origin + "': " + d.err.message);
}

// The smallest DCT scaling M/8 (libjpeg-turbo computes an MxM inverse DCT per 8x8 block) that
// keeps the crop at least the target size, so the resize that follows only ever shrinks.
int pick_eighths(const DecodePlan& plan) {
  if (plan.target_width <= 0 || plan.target_height <= 0) return 8;
  for (int m : kScaleEighths) {
    if (plan.crop.width * m >= plan.target_width * 8 &&
        plan.crop.height * m >= plan.target_height * 8) {
      return m;
    }
  }
  return 8;
}

// Adobe CMYK JPEGs store inverted values (the common case); others store plain CMYK.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, size_t pixels, bool inverted) {
  for (size_t i = 0; i < pixels; ++i) {
    int k = inverted ? cmyk[4 * i + 3] : 255 - cmyk[4 * i + 3];
    for (int c = 0; c < 3; ++c) {
      int v = inverted ? cmyk[4 * i + c] : 255 - cmyk[4 * i + c];
      rgb[3 * i + c] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
}

}  // namespace

ImageHeader read_header(const uint8_t* data, size_t size, const std::string& origin) {
  Decoder d;
  if (!guarded_read_header(d, data, size)) fail(d, origin);
  return {ImageFormat::kJpeg, static_cast<int>(d.cinfo.image_width),
          static_cast<int>(d.cinfo.image_height), d.cinfo.num_components};
}

DecodedImage decode(const uint8_t* data, size_t size, const DecodeOptions& options,
                    const std::string& origin) {
  Decoder d;
  if (!guarded_read_header(d, data, size)) fail(d, origin);
  const int width = static_cast<int>(d.cinfo.image_width);
  const int height = static_cast<int>(d.cinfo.image_height);
  if (options.max_pixels > 0 && int64_t{width} * height > options.max_pixels) {
    throw SampleError(SampleFault::kTooLarge, "JPEG '" + origin + "': " + std::to_string(width) +
                                                  "x" + std::to_string(height) +
                                                  " pixels exceed the limit of " +
                                                  std::to_string(options.max_pixels));
  }
  const ImageHeader header{ImageFormat::kJpeg, width, height, d.cinfo.num_components};
  const DecodePlan plan = requested_plan(options, header);
  const CropRect& crop = plan.crop;
  const int m = pick_eighths(plan);
  const bool cmyk = d.cinfo.jpeg_color_space == JCS_CMYK || d.cinfo.jpeg_color_space == JCS_YCCK;
  if (!guarded_plan(d, m, cmyk ? JCS_CMYK : JCS_RGB)) fail(d, origin);

  // The crop in scaled coordinates: round outwards so the window covers the whole crop.
  const auto scaled_w = static_cast<int>(d.cinfo.output_width);
  const auto scaled_h = static_cast<int>(d.cinfo.output_height);
  const int x0 = crop.x * m / 8, y0 = crop.y * m / 8;
  const int x1 = std::min(scaled_w, ((crop.x + crop.width) * m + 7) / 8);
  const int y1 = std::min(scaled_h, ((crop.y + crop.height) * m + 7) / 8);
  Window window{static_cast<JDIMENSION>(x0), static_cast<JDIMENSION>(y0),
                static_cast<JDIMENSION>(x1 - x0), static_cast<JDIMENSION>(y1 - y0)};

  const int comps = cmyk ? 4 : 3;
  thread_local std::vector<uint8_t> row;  // one scanline; grows to the widest image seen
  row.resize(std::max(row.size(), static_cast<size_t>(scaled_w) * comps));
  at::Tensor out = at::empty({window.height, window.width, comps}, at::kByte);
  if (!guarded_decode(d, window, row.data(), out.data_ptr<uint8_t>())) fail(d, origin);
  if (cmyk) {
    at::Tensor rgb = at::empty({window.height, window.width, 3}, at::kByte);
    cmyk_to_rgb(out.data_ptr<uint8_t>(), rgb.data_ptr<uint8_t>(),
                static_cast<size_t>(window.height) * window.width, d.cinfo.saw_Adobe_marker);
    out = rgb;
  }
  DecodedImage result;
  result.pixels = out;
  result.scale_eighths = m;
  const int rx = x0 * 8 / m, ry = y0 * 8 / m;
  result.region = {rx, ry, std::min(width - rx, ((x1 - x0) * 8 + m - 1) / m),
                   std::min(height - ry, ((y1 - y0) * 8 + m - 1) / m)};
  return result;
}

std::string encode(const at::Tensor& rgb, int quality) {
  at::Tensor pixels = rgb.contiguous();
  jpeg_compress_struct cinfo;
  ErrorManager err;
  std::memset(&err, 0, sizeof err);
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_create_compress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
    throw Error(std::string("JPEG encode failed: ") + err.message);
  }
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(pixels.size(1));
  cinfo.image_height = static_cast<JDIMENSION>(pixels.size(0));
  const int channels = static_cast<int>(pixels.size(2));
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const auto* base = pixels.data_ptr<uint8_t>();
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row[1] = {const_cast<uint8_t*>(base) +
                       static_cast<size_t>(cinfo.next_scanline) * cinfo.image_width * channels};
    jpeg_write_scanlines(&cinfo, row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

}  // namespace loom::data::jpeg
