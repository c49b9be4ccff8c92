#include "loom/train/safetensors.h"

#include <c10/util/safe_numerics.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/mapped_file.h"

namespace loom::train {
namespace {

// The header's length: the file's first 8 bytes, little-endian.
uint64_t header_length_of(const char* bytes) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) {
    length |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  }
  return length;
}

const std::vector<std::pair<at::ScalarType, const char*>>& dtype_names() {
  static const std::vector<std::pair<at::ScalarType, const char*>> names = {
      {at::kFloat, "F32"}, {at::kDouble, "F64"}, {at::kHalf, "F16"},  {at::kBFloat16, "BF16"},
      {at::kLong, "I64"},  {at::kInt, "I32"},    {at::kShort, "I16"}, {at::kChar, "I8"},
      {at::kByte, "U8"},   {at::kBool, "BOOL"}};
  return names;
}

const char* dtype_name(at::ScalarType type, const std::string& tensor) {
  for (const auto& [t, name] : dtype_names()) {
    if (t == type) return name;
  }
  throw Error("safetensors: tensor '" + tensor + "' has unsupported dtype " +
              std::string(c10::toString(type)));
}

// Row-major CPU copies of the tensors, so bytes can be written straight from them.
std::vector<at::Tensor> dense_cpu(const models::NamedTensors& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : tensors) out.push_back(t.detach().to(at::kCPU).contiguous());
  return out;
}

std::string shape_text(const std::vector<int64_t>& sizes) {
  std::string out;
  for (int64_t s : sizes) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return "[" + out + "]";
}

// The header, padded with spaces so the data starts 8-byte aligned, with its length prefix.
std::string encode_header(const std::vector<TensorToFetch>& tensors,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const TensorToFetch& t : tensors) {
    const auto bytes = static_cast<size_t>(t.nbytes());
    header[t.name] = {{"dtype", dtype_name(t.dtype, t.name)},
                      {"shape", t.sizes},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t length = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + json;
}

at::ScalarType parse_dtype(const std::string& name, const std::string& tensor,
                           const std::string& origin) {
  for (const auto& [t, n] : dtype_names()) {
    if (name == n) return t;
  }
  throw DataError("safetensors file '" + origin + "': tensor '" + tensor + "' has unknown dtype '" +
                  name + "'");
}

}  // namespace

std::vector<TensorToFetch> held(const models::NamedTensors& tensors) {
  std::vector<TensorToFetch> out;
  for (const auto& [name, t] : tensors) {
    out.push_back({name, t.scalar_type(), t.sizes().vec(), [t] { return t; }});
  }
  return out;
}

std::string encode_safetensors(const models::NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  const std::vector<at::Tensor> dense = dense_cpu(tensors);
  std::string out = encode_header(held(tensors), metadata);
  for (const auto& t : dense) {
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return out;
}

void write_safetensors(const std::string& path, const models::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, held(tensors), metadata);
}

void write_safetensors(const std::string& path, const std::vector<TensorToFetch>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = encode_header(tensors, metadata);
  SyncedWriter writer(path);
  writer.write(header.data(), header.size());
  for (const TensorToFetch& entry : tensors) {
    const at::Tensor t = entry.fetch().detach().to(at::kCPU).contiguous();
    if (t.scalar_type() != entry.dtype || t.sizes().vec() != entry.sizes) {
      throw Error(
          "safetensors: tensor '" + entry.name + "' came as " +
              std::string(c10::toString(t.scalar_type())) + " " + shape_text(t.sizes().vec()) +
              ", announced as " + std::string(c10::toString(entry.dtype)) + " " +
              shape_text(entry.sizes),
          {{"tensor", entry.name},
           {"problem", "not_as_announced"},
           {"value",
            std::string(c10::toString(t.scalar_type())) + " " + shape_text(t.sizes().vec())},
           {"expected", std::string(c10::toString(entry.dtype)) + " " + shape_text(entry.sizes)}});
    }
    writer.write(t.data_ptr(), t.nbytes());
  }
  writer.close();
}

namespace {

// The tensors of the safetensors bytes [bytes, bytes + size). With `mapped` (whose memory the
// bytes are), each is a tensor over its bytes there, holding the mapping, unless they are not
// aligned to its element size (then a copy); without, copies.
models::NamedTensors decode(const char* bytes, std::size_t size, const std::string& origin,
                            const std::shared_ptr<const MappedFile>& mapped) {
  auto bad = [&](const std::string& what) {
    return DataError("safetensors file '" + origin + "': " + what);
  };
  if (size < 8) throw bad("shorter than its 8-byte header length");
  const uint64_t header_length = header_length_of(bytes);
  if (header_length > size - 8) {
    throw bad("header length " + std::to_string(header_length) + " exceeds the file size " +
              std::to_string(size));
  }
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(bytes + 8, bytes + 8 + header_length);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not valid JSON: ") + e.what());
  }
  const size_t data_start = 8 + header_length;
  const size_t data_size = size - data_start;
  models::NamedTensors out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      at::ScalarType type = parse_dtype(entry.at("dtype").get<std::string>(), name, origin);
      std::vector<int64_t> shape = entry.at("shape").get<std::vector<int64_t>>();
      auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size) {
        throw bad("tensor '" + name + "' has data_offsets outside the data section");
      }
      const auto options = at::TensorOptions().dtype(type);
      int64_t numel = 1;
      for (int64_t extent : shape) {
        int64_t product = 0;
        if (extent < 0 || c10::mul_overflows(numel, extent, &product)) {
          throw bad("tensor '" + name + "' has an impossible shape " + shape_text(shape));
        }
        numel = product;
      }
      const uint64_t covered = offsets[1] - offsets[0];
      const std::size_t element = c10::elementSize(type);
      if (covered % element != 0 || static_cast<uint64_t>(numel) != covered / element) {
        throw bad("tensor '" + name + "' covers " + std::to_string(covered) +
                  " bytes but its shape holds " + std::to_string(numel) + " elements of " +
                  std::to_string(element) + " bytes");
      }
      const char* at = bytes + data_start + offsets[0];
      const bool aligned = reinterpret_cast<std::uintptr_t>(at) % element == 0;
      if (mapped && aligned && covered > 0) {
        // The mapping is a private copy: a tensor written in place changes this process's
        // pages, never the file.
        out.emplace_back(name, at::from_blob(
                                   const_cast<char*>(at), shape, [mapped](void*) {}, options));
        continue;
      }
      at::Tensor t = at::empty(shape, options);
      // An empty tensor has no storage (a null data pointer), which memcpy may not be given.
      if (covered > 0) std::memcpy(t.data_ptr(), at, covered);
      out.emplace_back(name, t);
    } catch (const nlohmann::json::exception& e) {
      throw bad("tensor '" + name + "' has a malformed entry: " + e.what());
    }
  }
  return out;
}

}  // namespace

models::NamedTensors decode_safetensors(const std::string& bytes, const std::string& origin) {
  return decode(bytes.data(), bytes.size(), origin, nullptr);
}

models::NamedTensors read_safetensors(const std::string& path) {
  const std::shared_ptr<const MappedFile> file =
      MappedFile::open(path, MappedFile::Access::kPrivateCopy);
  return decode(reinterpret_cast<const char*>(file->data()), file->size(), path, file);
}

std::map<std::string, at::ScalarType> read_safetensors_dtypes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char length_bytes[8] = {};
  if (!in.read(length_bytes, sizeof(length_bytes))) {
    throw DataError("safetensors file '" + path + "': cannot read its header length",
                    {{"path", path}});
  }
  const uint64_t header_length = header_length_of(length_bytes);
  // Read as far as the file goes: a length past its end is a short read, named below.
  std::string header(static_cast<size_t>(std::min<uint64_t>(header_length, 1ull << 30)), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) {
    throw DataError("safetensors file '" + path + "': header length " +
                        std::to_string(header_length) + " exceeds the file",
                    {{"path", path}});
  }
  const nlohmann::json parsed = nlohmann::json::parse(header, nullptr, false);
  if (!parsed.is_object()) {
    throw DataError("safetensors file '" + path + "': header is not a JSON object",
                    {{"path", path}});
  }
  std::map<std::string, at::ScalarType> types;
  for (const auto& [name, entry] : parsed.items()) {
    if (name == "__metadata__" || !entry.is_object() || !entry.contains("dtype")) continue;
    types[name] = parse_dtype(entry["dtype"].get<std::string>(), name, path);
  }
  return types;
}

}  // namespace loom::train
