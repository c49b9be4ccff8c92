// The safetensors format (an 8-byte little-endian header length, a JSON header giving each
// tensor's dtype, shape and byte range, then raw little-endian data). Unlike pickle, loading it
// runs no code, and other tools (Python's safetensors) read it directly.
#pragma once

#include <map>
#include <string>

#include "loom/core/tensor_to_fetch.h"
#include "loom/models/model.h"

namespace loom::train {

// Writes tensors in the given order with string metadata ("__metadata__"); fsyncs the file.
void write_safetensors(const std::string& path, const models::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Tensors in memory as tensors to fetch (each fetch gives the tensor itself).
std::vector<TensorToFetch> held(const models::NamedTensors& tensors);

// The same file from tensors fetched one at a time as the writer reaches them: at most one of
// them is held at once. Throws Error when one fetched does not have its announced type and shape.
void write_safetensors(const std::string& path, const std::vector<TensorToFetch>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Serialises to bytes (what write_safetensors writes).
std::string encode_safetensors(const models::NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Reads every tensor (in file order). Throws DataError naming the path for anything malformed:
// short file, bad header, unknown dtype, ranges outside the data or not matching the shape.
// The tensors are over the file mapped into memory (a private copy-on-write mapping, held until
// the last of them goes; one whose bytes are not aligned to its element size is a copy), so
// loading a model from them holds the model's bytes once, not the file's bytes as well.
models::NamedTensors read_safetensors(const std::string& path);
// The type of each tensor in the file at `path`, from its header alone (the data is not read).
std::map<std::string, at::ScalarType> read_safetensors_dtypes(const std::string& path);
// The same from bytes in memory (copies of them).
models::NamedTensors decode_safetensors(const std::string& bytes, const std::string& origin);

}  // namespace loom::train
