#include "loom/models/model.h"

namespace loom::models {

int64_t Model::parameter_count() {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Model::set_memory_format(at::MemoryFormat format) {
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(format));
  }
}

}  // namespace loom::models
