#include "loom/core/caching_allocator.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <thread>

namespace loom {
namespace {

constexpr size_t kBig = 1 << 20;

TEST(CachingCpuAllocator, ReusesFreedBlocksOfTheSameSize) {
  CachingCpuAllocator a(64 * kBig);
  void* first = nullptr;
  {
    c10::DataPtr p = a.allocate(kBig);
    first = p.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % CachingCpuAllocator::kAlignment, 0u);
    EXPECT_EQ(a.stats().bytes_in_use, kBig);
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().bytes_cached, kBig);
  c10::DataPtr again = a.allocate(kBig - 10);  // rounds to the same 64-byte size
  EXPECT_EQ(again.get(), first);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, kBig);
}

// LibTorch's raw_allocate()/raw_deallocate() path (used by some kernels) needs the DataPtr's
// context to be its data pointer and a raw deleter.
TEST(CachingCpuAllocator, SupportsRawAllocation) {
  CachingCpuAllocator a(64 * kBig);
  for (size_t bytes : {size_t{16}, kBig}) {
    void* p = a.raw_allocate(bytes);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[bytes - 1] = 7;
    a.raw_deallocate(p);
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().bytes_cached, kBig);
}

TEST(CachingCpuAllocator, SmallBlocksBypassTheCache) {
  CachingCpuAllocator a(64 * kBig);
  {
    c10::DataPtr p = a.allocate(100);
    ASSERT_NE(p.get(), nullptr);
  }
  EXPECT_EQ(a.stats().allocations, 0u);
  EXPECT_EQ(a.stats().bytes_cached, 0u);
}

TEST(CachingCpuAllocator, NeverCachesMoreThanItsLimit) {
  CachingCpuAllocator a(3 * kBig);
  {
    std::vector<c10::DataPtr> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(a.allocate(kBig));
    EXPECT_EQ(a.stats().bytes_in_use, 5 * kBig);
  }
  EXPECT_EQ(a.stats().bytes_cached, 3 * kBig);
  a.release_cached();
  EXPECT_EQ(a.stats().bytes_cached, 0u);
}

TEST(CachingCpuAllocator, ConcurrentAllocateAndFreeKeepCountsExact) {
  CachingCpuAllocator a(1024 * kBig);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      for (int i = 0; i < 200; ++i) {
        c10::DataPtr p = a.allocate(kBig * (1 + (i + t) % 3));
        static_cast<char*>(p.get())[0] = 1;
      }
    });
  }
  for (auto& th : threads) th.join();
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.allocations, 800u);
  EXPECT_GT(s.cache_hits, 700u);  // at most a few blocks per size per thread are ever fresh
}

TEST(CachingCpuAllocator, InstalledAsLibTorchsCpuAllocatorComputesTheSameValues) {
  // LibTorch settles its thread count (and with it OpenMP's, which OpenBLAS follows) at its
  // first parallel operation: a product before it may run on another number of threads and
  // differ in the last bits (seen on a 2-vCPU AMD EPYC host). Settle it first.
  at::init_num_threads();
  at::manual_seed(0);
  at::Tensor a = at::randn({300, 300}), b = at::randn({300, 300});
  at::Tensor before = at::mm(a, b);
  CachingCpuAllocator& installed = install_caching_cpu_allocator(256 * kBig);
  EXPECT_EQ(installed_caching_cpu_allocator(), &installed);
  EXPECT_EQ(&install_caching_cpu_allocator(1), &installed);  // once per process
  const uint64_t allocations = installed.stats().allocations;
  at::Tensor after = at::mm(a.clone(), b.clone());
  EXPECT_GT(installed.stats().allocations, allocations);  // 360 KB tensors now come from it
  EXPECT_TRUE(before.equal(after));
}

}  // namespace
}  // namespace loom
