#include "loom/data/remote/batch_wire.h"

#include <lz4.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/batch_memory.h"
#include "loom/core/crc32c.h"
#include "loom/data/remote/data_service.pb.h"

namespace loom::data {
namespace {

uint32_t batch_crc(const void* inputs, size_t input_bytes, const std::string& targets,
                   const std::string& indices) {
  uint32_t crc = crc32c(inputs, input_bytes);
  crc = crc32c(targets.data(), targets.size(), crc);
  return crc32c(indices.data(), indices.size(), crc);
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

at::Tensor int64_tensor(const std::string& bytes, at::IntArrayRef sizes) {
  at::Tensor out = at::empty(sizes, at::kLong);
  std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

// `problem` names the failed check for the error's fields (malformed, position, input_type,
// input_shape, target_shape, sizes, counts, lz4, crc).
[[noreturn]] void corrupt(const BatchShape& e, const std::string& problem, const std::string& what,
                          ErrorFields fields = {}) {
  fields["problem"] = problem;
  fields["epoch"] = std::to_string(e.epoch);
  fields["step"] = std::to_string(e.step);
  throw CorruptBatch("remote batch " + std::to_string(e.step) + " of epoch " +
                         std::to_string(e.epoch + 1) + ": " + what,
                     std::move(fields));
}

// Reads the protobuf wire format across a received buffer's slices, never past their end.
class SliceReader {
 public:
  SliceReader(const std::vector<grpc::Slice>& slices, const BatchShape& e)
      : slices_(slices), e_(e) {}

  bool at_end() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    return slice_ == slices_.size();
  }
  uint64_t position() const { return position_; }  // bytes read or skipped so far

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_end()) corrupt(e_, "malformed", "the reply ends in the middle of a field");
      const uint8_t b = slices_[slice_].begin()[offset_++];
      ++position_;
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return value;
    }
    corrupt(e_, "malformed", "a malformed varint");
  }
  // Copies the next n bytes to `to`, or skips them when `to` is null.
  void take(char* to, uint64_t n) {
    while (n > 0) {
      if (at_end()) corrupt(e_, "malformed", "a field runs past the end of the reply");
      const size_t chunk = std::min<uint64_t>(n, slices_[slice_].size() - offset_);
      if (to) {
        std::memcpy(to, slices_[slice_].begin() + offset_, chunk);
        to += chunk;
      }
      offset_ += chunk;
      position_ += chunk;
      n -= chunk;
    }
  }

 private:
  const std::vector<grpc::Slice>& slices_;
  const BatchShape& e_;
  size_t slice_ = 0, offset_ = 0;
  uint64_t position_ = 0;
};

// A reply as received: its small fields, parsed (and so checked) by protobuf, and where its
// inputs lie in the slices gRPC received, which hold them until they are copied once.
struct ReceivedReply {
  remote::BatchReply fields;  // every field but the inputs
  std::vector<grpc::Slice> slices;
  uint64_t input_start = 0, input_bytes = 0;

  void copy_inputs(char* to, const BatchShape& e) const {
    SliceReader reader(slices, e);
    reader.take(nullptr, input_start);
    reader.take(to, input_bytes);
  }
};

void append_varint(std::string& out, uint64_t n) {
  for (; n >= 0x80; n >>= 7) out.push_back(static_cast<char>((n & 0x7F) | 0x80));
  out.push_back(static_cast<char>(n));
}

constexpr uint64_t kInputsField = 4;  // BatchReply.inputs
constexpr uint64_t kMaxSmallField = 64 << 20;

ReceivedReply split_reply(const grpc::ByteBuffer& buffer, const BatchShape& e) {
  ReceivedReply r;
  if (!buffer.Dump(&r.slices).ok()) corrupt(e, "malformed", "the reply could not be read");
  SliceReader reader(r.slices, e);
  std::string small;  // the other fields, re-encoded for protobuf's parser
  bool have_inputs = false;
  while (!reader.at_end()) {
    const uint64_t tag = reader.varint();
    const auto type = static_cast<uint32_t>(tag & 7);
    if (tag >> 3 == kInputsField && type == 2) {
      if (have_inputs) corrupt(e, "malformed", "the inputs field comes twice");
      have_inputs = true;
      r.input_bytes = reader.varint();
      r.input_start = reader.position();
      reader.take(nullptr, r.input_bytes);
      continue;
    }
    append_varint(small, tag);
    if (type == 0) {
      append_varint(small, reader.varint());
    } else if (type == 1 || type == 5) {
      char value[8];
      const int width = type == 1 ? 8 : 4;
      reader.take(value, width);
      small.append(value, width);
    } else if (type == 2) {
      const uint64_t n = reader.varint();
      if (n > kMaxSmallField) corrupt(e, "malformed", "a field of " + std::to_string(n) + " bytes");
      append_varint(small, n);
      const size_t at = small.size();
      small.resize(at + n);
      reader.take(small.data() + at, n);
    } else {
      corrupt(e, "malformed", "a field of wire type " + std::to_string(type));
    }
  }
  if (!r.fields.ParseFromString(small)) corrupt(e, "malformed", "its fields do not parse");
  return r;
}

}  // namespace

grpc::ByteBuffer pack_batch(const Batch& batch, int64_t epoch, int64_t step,
                            const LoaderStats& tally, double build_seconds, bool lz4,
                            bool flip_image_byte) {
  // The inputs' owner rides along with the slice that points into it.
  struct Payload {
    at::Tensor inputs;
    std::string compressed;
  };
  auto payload = std::make_unique<Payload>();
  payload->inputs = batch.inputs.contiguous();
  const at::ScalarType type = payload->inputs.scalar_type();
  if (type != at::kByte && type != at::kLong) {
    throw Error(std::string("pack_batch: inputs of ") + c10::toString(type) +
                " have no wire type (uint8 pixels or int64 token ids)");
  }
  auto* raw = static_cast<char*>(payload->inputs.data_ptr());
  const size_t raw_bytes = payload->inputs.nbytes();

  remote::BatchReply fields;
  fields.set_epoch(epoch);
  fields.set_step(step);
  for (int64_t d : payload->inputs.sizes()) fields.add_shape(d);
  fields.set_input_type(type == at::kByte ? remote::UINT8 : remote::INT64);
  for (int64_t d : batch.targets.sizes()) fields.add_target_shape(d);
  fields.set_targets(tensor_bytes(batch.targets.to(at::kLong)));
  fields.set_indices(tensor_bytes(batch.indices));
  fields.set_crc32c(batch_crc(raw, raw_bytes, fields.targets(), fields.indices()));
  fields.set_samples(tally.samples);
  for (int64_t b : tally.bad) fields.add_bad(b);
  fields.set_substituted(tally.substituted);
  fields.set_build_seconds(build_seconds);

  char* data = raw;
  size_t bytes = raw_bytes;
  if (lz4 && raw_bytes > 0) {
    std::string& packed = payload->compressed;
    packed.resize(static_cast<size_t>(LZ4_compressBound(static_cast<int>(raw_bytes))));
    const int size = LZ4_compress_default(raw, packed.data(), static_cast<int>(raw_bytes),
                                          static_cast<int>(packed.size()));
    if (size <= 0)
      throw Error("pack_batch: LZ4 could not compress " + std::to_string(raw_bytes) + " bytes");
    packed.resize(static_cast<size_t>(size));
    data = packed.data();
    bytes = packed.size();
  }
  if (flip_image_byte && bytes > 0) {
    if (data == raw) {  // the caller's batch may be shared: damage a private copy
      payload->compressed.assign(raw, bytes);
      data = payload->compressed.data();
    }
    data[0] ^= 0x5A;
  }

  // Protocol buffers may carry a message's fields in any order, so the inputs field (4, bytes)
  // goes last, framed here by hand: its tag, its length as a varint, then its bytes.
  std::string head = fields.SerializeAsString();
  append_varint(head, (kInputsField << 3) | 2);  // field 4, length-delimited
  append_varint(head, bytes);
  if (bytes == 0) {
    const grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {
      grpc::Slice(head),
      grpc::Slice(
          data, bytes, [](void* owner) { delete static_cast<Payload*>(owner); }, payload.get())};
  payload.release();  // now owned by the second slice
  return grpc::ByteBuffer(slices, 2);
}

namespace {

template <typename Dims>
std::string dims_text(const Dims& dims) {
  std::string out;
  for (int64_t d : dims) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "[" + out + "]";
}

// Whether `dims` are [count, sample...] with count within a batch.
bool shaped_as(const google::protobuf::RepeatedField<int64_t>& dims,
               const std::vector<int64_t>& sample, int64_t max_samples) {
  if (dims.size() != static_cast<int>(sample.size()) + 1 || dims[0] < 0 || dims[0] > max_samples)
    return false;
  return std::equal(sample.begin(), sample.end(), dims.begin() + 1);
}

std::string expected_text(const std::vector<int64_t>& sample, int64_t max_samples) {
  return "at most " + std::to_string(max_samples) + " of " + dims_text(sample);
}

}  // namespace

Batch unpack_batch(const grpc::ByteBuffer& reply, bool lz4, const BatchShape& e,
                   LoaderStats& tally) {
  ReceivedReply received = split_reply(reply, e);
  const remote::BatchReply& fields = received.fields;
  const BatchLayout& layout = e.layout;
  if (fields.epoch() != e.epoch || fields.step() != e.step) {
    corrupt(e, "position",
            "the reply is for batch " + std::to_string(fields.step()) + " of epoch " +
                std::to_string(fields.epoch() + 1));
  }
  const remote::InputType expected_type =
      layout.input_dtype == at::kByte ? remote::UINT8 : remote::INT64;
  if (fields.input_type() != expected_type) {
    const int got = fields.input_type();
    corrupt(e, "input_type",
            "inputs are of type " +
                (remote::InputType_IsValid(got) ? remote::InputType_Name(got)
                                                : "number " + std::to_string(got)) +
                ", expected " + remote::InputType_Name(expected_type));
  }
  if (!shaped_as(fields.shape(), layout.input_dims, layout.batch_size)) {
    corrupt(e, "input_shape",
            "inputs are " + dims_text(fields.shape()) + ", expected " +
                expected_text(layout.input_dims, layout.batch_size),
            {{"value", dims_text(fields.shape())},
             {"expected", dims_text(layout.input_dims)},
             {"max_samples", std::to_string(layout.batch_size)}});
  }
  const int64_t count = fields.shape(0);
  if (!shaped_as(fields.target_shape(), layout.target_dims, layout.batch_size) ||
      fields.target_shape(0) != count) {
    corrupt(
        e, "target_shape",
        "targets are " + dims_text(fields.target_shape()) + ", expected " + std::to_string(count) +
            " of the inputs' " + expected_text(layout.target_dims, layout.batch_size),
        {{"value", dims_text(fields.target_shape())}, {"expected", dims_text(layout.target_dims)}});
  }
  std::vector<int64_t> input_sizes(fields.shape().begin(), fields.shape().end());
  std::vector<int64_t> target_sizes(fields.target_shape().begin(), fields.target_shape().end());
  const size_t raw_bytes = static_cast<size_t>(c10::multiply_integers(input_sizes)) *
                           c10::elementSize(layout.input_dtype);
  const size_t target_bytes = c10::multiply_integers(target_sizes) * sizeof(int64_t);
  if (fields.targets().size() != target_bytes ||
      fields.indices().size() != static_cast<size_t>(count) * sizeof(int64_t)) {
    corrupt(e, "sizes", "targets or indices are not the int64 values their shapes say");
  }
  if (fields.bad_size() != 4 || fields.samples() < count) {
    corrupt(e, "counts", "malformed sample counts");
  }
  if (!lz4 && received.input_bytes != raw_bytes) {
    corrupt(e, "sizes",
            "inputs are " + std::to_string(received.input_bytes) + " bytes, expected " +
                std::to_string(raw_bytes));
  }

  // One copy, from the received slices into a tensor from the batch pool (reused memory rather
  // than pages faulted in afresh every batch).
  Batch batch;
  batch.inputs = empty_batch_tensor(input_sizes, layout.input_dtype);
  auto* out = static_cast<char*>(batch.inputs.data_ptr());
  if (lz4) {
    if (raw_bytes > LZ4_MAX_INPUT_SIZE ||
        received.input_bytes > static_cast<uint64_t>(LZ4_COMPRESSBOUND(raw_bytes))) {
      corrupt(e, "lz4",
              "LZ4 inputs are larger than " + std::to_string(raw_bytes) + " bytes could be");
    }
    std::string packed(received.input_bytes, '\0');
    received.copy_inputs(packed.data(), e);
    const int size = raw_bytes == 0
                         ? 0
                         : LZ4_decompress_safe(packed.data(), out, static_cast<int>(packed.size()),
                                               static_cast<int>(raw_bytes));
    if (size != static_cast<int>(raw_bytes)) {
      corrupt(e, "lz4", "LZ4 inputs do not decode to " + std::to_string(raw_bytes) + " bytes");
    }
  } else {
    received.copy_inputs(out, e);
  }
  if (batch_crc(out, raw_bytes, fields.targets(), fields.indices()) != fields.crc32c()) {
    corrupt(e, "crc", "CRC-32C does not match its contents");
  }
  batch.targets = int64_tensor(fields.targets(), target_sizes);
  batch.indices = int64_tensor(fields.indices(), {count});
  tally.samples += fields.samples();
  for (int i = 0; i < 4; ++i) tally.bad[static_cast<size_t>(i)] += fields.bad(i);
  tally.substituted += fields.substituted();
  tally.build_seconds += fields.build_seconds();
  return batch;
}

}  // namespace loom::data
