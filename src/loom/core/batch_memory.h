// Memory for batch tensors: the loader's uint8 batches, the feeder's float input, remote
// batches as received. They are the largest tensors a step allocates, the same sizes every
// step, and each is touched once per step; served by glibc they are a fresh mmap that is
// page-faulted in (and zeroed by the kernel) every time. Measured here: a Python loop over
// loom.data.Loader ran at 570 images/s with such memory, against 3,100 with Loom's caching
// allocator installed (bench/RESULTS.md), and the VM's page faults are the difference.
//
// So batch tensors come from a CachingCpuAllocator of their own, whatever LibTorch's allocator
// is: the speed of `runtime.allocator: caching` for the data path also in a process that never
// installs Loom's allocator (a Python script: importing loom changes no allocator). When the
// caching allocator is installed as LibTorch's, that one serves batches too (one cache, not two).
// Freed batches return to the pool, which keeps at most kBatchPoolBytes of them.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace loom {

constexpr size_t kBatchPoolBytes = size_t{1} << 30;

// The allocator batch tensors come from; lives as long as the process (tensors may outlive any
// loader). Thread-safe.
c10::Allocator& batch_allocator();

// An uninitialised CPU tensor from batch_allocator().
at::Tensor empty_batch_tensor(at::IntArrayRef sizes, at::ScalarType dtype,
                              at::MemoryFormat format = at::MemoryFormat::Contiguous);

}  // namespace loom
