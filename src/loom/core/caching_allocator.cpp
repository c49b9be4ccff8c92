#include "loom/core/caching_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace loom {

// Sits in the 64 bytes before a block's data.
struct CachingCpuAllocator::Header {
  size_t size;                       // data bytes (rounded when cached)
  const CachingCpuAllocator* owner;  // null: not cached, free to the system directly
};

namespace {

constexpr size_t kHeaderBytes = CachingCpuAllocator::kAlignment;

size_t round_up(size_t bytes) {
  const size_t a = CachingCpuAllocator::kAlignment;
  return (bytes + a - 1) / a * a;
}

char* system_allocate(size_t data_bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, CachingCpuAllocator::kAlignment, kHeaderBytes + data_bytes) != 0) {
    throw std::bad_alloc();
  }
  return static_cast<char*>(p);
}

std::atomic<CachingCpuAllocator*> g_installed{nullptr};

}  // namespace

CachingCpuAllocator::CachingCpuAllocator(size_t max_cached_bytes)
    : max_cached_bytes_(max_cached_bytes) {
  static_assert(sizeof(Header) <= kHeaderBytes, "the header must fit before 64-byte-aligned data");
}

CachingCpuAllocator::~CachingCpuAllocator() { release_cached(); }

c10::DataPtr CachingCpuAllocator::allocate(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes < kMinCachedBytes) {
    char* base = system_allocate(bytes);
    new (base) Header{bytes, nullptr};
    void* data = base + kHeaderBytes;
    return {data, data, &CachingCpuAllocator::free_block, cpu};
  }
  const size_t size = round_up(bytes);
  Header* header = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.allocations;
    // The smallest free block that fits and wastes at most a quarter: sizes that vary a little
    // from call to call (decoded crops) reuse blocks instead of piling up new ones.
    auto it = free_blocks_.lower_bound(size);
    if (it != free_blocks_.end() && it->first <= size + size / 4) {
      header = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_blocks_.erase(it);
      stats_.bytes_cached -= header->size;
      ++stats_.cache_hits;
    }
    stats_.bytes_in_use += header ? header->size : size;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }
  if (!header) {
    char* base = nullptr;
    try {
      base = system_allocate(size);
    } catch (const std::bad_alloc&) {
      // Out of memory with blocks parked in the cache: give them back and try once more.
      release_cached();
      try {
        base = system_allocate(size);
      } catch (const std::bad_alloc&) {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_.bytes_in_use -= size;
        throw;
      }
    }
    header = new (base) Header{size, this};
  }
  void* data = reinterpret_cast<char*>(header) + kHeaderBytes;
  return {data, data, &CachingCpuAllocator::free_block, cpu};
}

void CachingCpuAllocator::free_block(void* data) {
  if (!data) return;
  auto* header = reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes);
  if (header->owner) {
    header->owner->give_back(header);
  } else {
    std::free(header);
  }
}

void CachingCpuAllocator::give_back(Header* header) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.bytes_in_use -= header->size;
    if (stats_.bytes_cached + header->size <= max_cached_bytes_) {
      free_blocks_[header->size].push_back(header);
      stats_.bytes_cached += header->size;
      return;
    }
  }
  std::free(header);
}

AllocatorStats CachingCpuAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingCpuAllocator::reset_peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void CachingCpuAllocator::release_cached() const {
  std::map<size_t, std::vector<Header*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks.swap(free_blocks_);
    stats_.bytes_cached = 0;
  }
  for (auto& [size, list] : blocks) {
    for (Header* h : list) std::free(h);
  }
}

CachingCpuAllocator& install_caching_cpu_allocator(size_t max_cached_bytes) {
  static CachingCpuAllocator* instance = [&] {
    auto* a =
        new CachingCpuAllocator(max_cached_bytes);  // never destroyed: tensors may outlive main
    // Priority above LibTorch's default (0) so a later default registration cannot displace it.
    c10::SetCPUAllocator(a, /*priority=*/1);
    g_installed.store(a);
    return a;
  }();
  return *instance;
}

CachingCpuAllocator* installed_caching_cpu_allocator() { return g_installed.load(); }

void keep_freed_malloc_memory() {
  // glibc serves blocks from 128 KB up (a threshold it raises by itself only slowly) with their
  // own mmap and unmaps them on free, and trims freed heap at 128 KB: a receive buffer or an
  // image of the same size next time is page-faulted in afresh. Up to 32 MB (glibc's largest
  // heap block) blocks come from the heap, and up to 256 MB of free heap per arena stays mapped.
  // Measured: receiving a remote batch cost the trainer 0.42-0.59 ms per 224x224 image before,
  // 0.10-0.13 after (bench/RESULTS.md).
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void use_configured_allocator(const std::string& allocator, uint64_t memory_bytes) {
  if (allocator != "caching") return;
  install_caching_cpu_allocator(memory_bytes / 4);
  keep_freed_malloc_memory();
}

}  // namespace loom
