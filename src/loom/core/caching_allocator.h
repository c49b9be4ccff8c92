// A CPU allocator for LibTorch that keeps freed blocks for reuse instead of returning them to
// the operating system.
//
// Why: a training step allocates the same tensor sizes every time. glibc serves large blocks
// with mmap and unmaps them on free, so every step pays page faults to get the same memory
// back. Measured here: 40% of a small CNN's step and 20% of ResNet-18's went to that churn
// (see bench/RESULTS.md). This is the CPU counterpart of PyTorch's CUDA caching allocator.
//
// Blocks of at least kMinCachedBytes are cached by size (rounded to 64 bytes, the alignment
// LibTorch uses); a request takes the smallest free block that fits with at most a quarter to
// spare. Smaller blocks go straight to the system, whose small-block heap is already fast. The
// cache holds at most `max_cached_bytes` of free blocks; beyond that, freed blocks go back to the
// system. Thread-safe.
//
// Every block starts with a 64-byte header (its size and owner) just before the data, so a
// block is freed from its data pointer alone: LibTorch's raw_allocate() requires the DataPtr's
// context to be the data pointer itself.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace loom {

struct AllocatorStats {
  uint64_t allocations = 0;  // blocks handed out (cached sizes only)
  uint64_t cache_hits = 0;   // ... of which came from the cache
  size_t bytes_in_use = 0;   // handed out and not yet freed
  size_t bytes_cached = 0;   // free, kept for reuse
  size_t peak_bytes_in_use = 0;
};

class CachingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kMinCachedBytes = 64 * 1024;
  static constexpr size_t kAlignment = 64;

  explicit CachingCpuAllocator(size_t max_cached_bytes);
  ~CachingCpuAllocator() override;

  c10::DataPtr allocate(size_t bytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CachingCpuAllocator::free_block; }

  AllocatorStats stats() const;
  // Starts a new peak from the bytes in use now: to measure the peak of one phase of a run.
  void reset_peak() const;
  // Returns every cached block to the system.
  void release_cached() const;

 private:
  struct Header;
  static void free_block(void* data);
  void give_back(Header* header) const;

  size_t max_cached_bytes_;
  mutable std::mutex mutex_;
  mutable std::map<size_t, std::vector<Header*>> free_blocks_;  // by rounded size
  mutable AllocatorStats stats_;
};

// Makes a process-wide CachingCpuAllocator LibTorch's CPU allocator (the first call creates and
// installs it; later calls return the same one). Tensors allocated before keep their own
// deleters, so installing mid-run is safe. The instance is never destroyed.
CachingCpuAllocator& install_caching_cpu_allocator(size_t max_cached_bytes);

// The installed instance, or nullptr.
CachingCpuAllocator* installed_caching_cpu_allocator();

// The same for memory other libraries take with malloc (gRPC's buffers, protobuf, decoders):
// glibc keeps large freed blocks for reuse instead of unmapping them. Process-wide: for the
// process's owner (the `loom` command, a trainer), never on import.
void keep_freed_malloc_memory();

// runtime.allocator: "caching" installs the caching allocator with a quarter of physical memory
// as its cache limit and keep_freed_malloc_memory(); "system" leaves LibTorch's allocator and
// glibc's behaviour in place.
void use_configured_allocator(const std::string& allocator, uint64_t memory_bytes);

}  // namespace loom
