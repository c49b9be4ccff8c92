#include "loom/core/batch_memory.h"

#include <ATen/EmptyTensor.h>

#include "loom/core/caching_allocator.h"

namespace loom {

c10::Allocator& batch_allocator() {
  if (CachingCpuAllocator* installed = installed_caching_cpu_allocator()) return *installed;
  // Never destroyed: a batch freed after main() returns still finds its pool.
  static CachingCpuAllocator* const pool = new CachingCpuAllocator(kBatchPoolBytes);
  return *pool;
}

at::Tensor empty_batch_tensor(at::IntArrayRef sizes, at::ScalarType dtype,
                              at::MemoryFormat format) {
  return at::detail::empty_generic(sizes, &batch_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, format);
}

}  // namespace loom
