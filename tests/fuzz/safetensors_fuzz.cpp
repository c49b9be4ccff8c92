// The safetensors reader: checkpoints and exported models come from disk, perhaps from another
// machine or tool. Anything malformed must be a DataError; anything accepted must re-encode
// and decode to the same tensors.
#include <ATen/ATen.h>

#include <cstring>

#include "fuzz_target.h"
#include "loom/core/error.h"
#include "loom/train/safetensors.h"

namespace {

// Same dtype, shape and bytes (NaNs included, which Tensor::equal would call different).
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace

LOOM_FUZZ_TARGET(safetensors) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    const auto tensors = loom::train::decode_safetensors(input, "fuzz.safetensors");
    const auto again =
        loom::train::decode_safetensors(loom::train::encode_safetensors(tensors), "again");
    if (again.size() != tensors.size()) loom::fuzz::broken("re-encoding lost tensors");
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (again[i].first != tensors[i].first || !same_bits(again[i].second, tensors[i].second)) {
        loom::fuzz::broken("re-encoding changed a tensor");
      }
    }
  } catch (const loom::DataError&) {
  }
}
