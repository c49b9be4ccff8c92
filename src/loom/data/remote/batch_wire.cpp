#include "loom/data/remote/batch_wire.h"

#include <lz4.h>

#include <cstring>
#include <memory>
#include <string>

#include "loom/core/crc32c.h"
#include "loom/data/remote/data_service.pb.h"

namespace loom::data {
namespace {

uint32_t batch_crc(const void* images, size_t image_bytes, const std::string& labels,
                   const std::string& indices) {
  uint32_t crc = crc32c(images, image_bytes);
  crc = crc32c(labels.data(), labels.size(), crc);
  return crc32c(indices.data(), indices.size(), crc);
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

at::Tensor int64_tensor(const std::string& bytes, int64_t count) {
  at::Tensor out = at::empty({count}, at::kLong);
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

[[noreturn]] void corrupt(const BatchShape& e, const std::string& what) {
  throw CorruptBatch("remote batch " + std::to_string(e.step) + " of epoch " +
                     std::to_string(e.epoch + 1) + ": " + what);
}

}  // namespace

void pack_batch(const Batch& batch, const LoaderStats& tally, double build_seconds, bool lz4,
                remote::BatchReply& reply) {
  const at::Tensor images = batch.images.contiguous();
  const auto* raw = static_cast<const char*>(images.data_ptr());
  const size_t raw_bytes = static_cast<size_t>(images.numel());
  for (int64_t d : images.sizes()) reply.add_shape(d);
  reply.set_labels(tensor_bytes(batch.labels));
  reply.set_indices(tensor_bytes(batch.indices));
  reply.set_crc32c(batch_crc(raw, raw_bytes, reply.labels(), reply.indices()));
  if (lz4 && raw_bytes > 0) {
    std::string* packed = reply.mutable_images();
    packed->resize(static_cast<size_t>(LZ4_compressBound(static_cast<int>(raw_bytes))));
    const int size = LZ4_compress_default(raw, packed->data(), static_cast<int>(raw_bytes),
                                          static_cast<int>(packed->size()));
    if (size <= 0)
      throw Error("pack_batch: LZ4 could not compress " + std::to_string(raw_bytes) + " bytes");
    packed->resize(static_cast<size_t>(size));
  } else {
    reply.set_images(raw, raw_bytes);
  }
  reply.set_samples(tally.samples);
  for (int64_t b : tally.bad) reply.add_bad(b);
  reply.set_substituted(tally.substituted);
  reply.set_build_seconds(build_seconds);
}

Batch unpack_batch(remote::BatchReply& reply, bool lz4, const BatchShape& e, LoaderStats& tally) {
  if (reply.epoch() != e.epoch || reply.step() != e.step) {
    corrupt(e, "the reply is for batch " + std::to_string(reply.step()) + " of epoch " +
                   std::to_string(reply.epoch() + 1));
  }
  if (reply.shape_size() != 4)
    corrupt(e, "images have " + std::to_string(reply.shape_size()) + " dimensions, expected 4");
  const int64_t count = reply.shape(0);
  if (count < 0 || count > e.max_samples || reply.shape(1) != e.height ||
      reply.shape(2) != e.width || reply.shape(3) != e.channels) {
    corrupt(e, "images are [" + std::to_string(count) + ", " + std::to_string(reply.shape(1)) +
                   ", " + std::to_string(reply.shape(2)) + ", " + std::to_string(reply.shape(3)) +
                   "], expected at most " + std::to_string(e.max_samples) + " of " +
                   std::to_string(e.height) + "x" + std::to_string(e.width) + "x" +
                   std::to_string(e.channels));
  }
  const size_t raw_bytes = static_cast<size_t>(count * e.height * e.width * e.channels);
  const size_t id_bytes = static_cast<size_t>(count) * sizeof(int64_t);
  if (reply.labels().size() != id_bytes || reply.indices().size() != id_bytes) {
    corrupt(e, "labels or indices are not " + std::to_string(count) + " int64 values");
  }
  if (reply.bad_size() != 4 || reply.samples() < count) corrupt(e, "malformed sample counts");

  // Without compression the reply's own buffer becomes the tensor's storage.
  std::unique_ptr<std::string> buffer(reply.release_images());
  if (lz4) {
    auto raw = std::make_unique<std::string>(raw_bytes, '\0');
    const int size = raw_bytes == 0 ? 0
                                    : LZ4_decompress_safe(buffer->data(), raw->data(),
                                                          static_cast<int>(buffer->size()),
                                                          static_cast<int>(raw_bytes));
    if (size != static_cast<int>(raw_bytes)) {
      corrupt(e, "LZ4 images do not decode to " + std::to_string(raw_bytes) + " bytes");
    }
    buffer = std::move(raw);
  }
  if (buffer->size() != raw_bytes ||
      batch_crc(buffer->data(), raw_bytes, reply.labels(), reply.indices()) != reply.crc32c()) {
    corrupt(e, "CRC-32C does not match its contents");
  }
  Batch batch;
  std::string* storage = buffer.release();
  batch.images = at::from_blob(
      storage->data(), {count, e.height, e.width, e.channels}, [storage](void*) { delete storage; },
      at::TensorOptions().dtype(at::kByte));
  batch.labels = int64_tensor(reply.labels(), count);
  batch.indices = int64_tensor(reply.indices(), count);
  tally.samples += reply.samples();
  for (int i = 0; i < 4; ++i) tally.bad[static_cast<size_t>(i)] += reply.bad(i);
  tally.substituted += reply.substituted();
  tally.build_seconds += reply.build_seconds();
  return batch;
}

}  // namespace loom::data
