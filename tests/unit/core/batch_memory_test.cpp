// Batch tensors come from a pool of reused memory without touching LibTorch's allocator.
#include "loom/core/batch_memory.h"

#include <gtest/gtest.h>

#include "loom/core/caching_allocator.h"

namespace loom {
namespace {

TEST(BatchMemory, FreedBatchesAreReusedWithoutInstallingAnAllocator) {
  ASSERT_EQ(installed_caching_cpu_allocator(), nullptr);
  at::Tensor first = empty_batch_tensor({64, 224, 224, 3}, at::kByte);
  const void* memory = first.data_ptr();
  first.reset();
  at::Tensor second = empty_batch_tensor({64, 224, 224, 3}, at::kByte);
  EXPECT_EQ(second.data_ptr(), memory);  // the same block back, no fresh pages
  // LibTorch's own allocations are untouched.
  EXPECT_NE(c10::GetAllocator(c10::DeviceType::CPU), &batch_allocator());
  EXPECT_EQ(installed_caching_cpu_allocator(), nullptr);
}

TEST(BatchMemory, KeepsTheShapeTypeAndLayoutAsked) {
  at::Tensor t = empty_batch_tensor({8, 3, 32, 32}, at::kFloat, at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(t.sizes(), (at::IntArrayRef{8, 3, 32, 32}));
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_TRUE(t.is_contiguous(at::MemoryFormat::ChannelsLast));
  t.fill_(2.5f);
  EXPECT_EQ(t.sum().item<double>(), 2.5 * 8 * 3 * 32 * 32);
}

TEST(BatchMemory, IsTheInstalledCachingAllocatorWhenThereIsOne) {
  CachingCpuAllocator& installed = install_caching_cpu_allocator(size_t{1} << 28);
  EXPECT_EQ(&batch_allocator(), &installed);
}

}  // namespace
}  // namespace loom
