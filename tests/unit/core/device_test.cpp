// Which device a rank takes (runtime.device's values), and torch's CUDA library loaded late into a
// process that links LibTorch's CPU libraries only: on a host without a GPU (CI's) the library
// still loads and registers with ATen, and CUDA is then refused by name rather than by a crash.
#include "loom/core/device.h"

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/core/torch_build.h"

namespace loom {
namespace {

// The `problem` field of the ConfigError resolving `text` throws ("" for none).
std::string problem_resolving(const std::string& text, int local_rank = 0) {
  try {
    resolve_device(text, local_rank, "runtime.device");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.fields().at("key"), "runtime.device");
    return e.fields().at("problem");
  }
  return "";
}

TEST(Device, CpuIsAlwaysThereAndOtherNamesAreRefused) {
  EXPECT_EQ(resolve_device("cpu", 3, "runtime.device"), c10::Device(c10::kCPU));
  EXPECT_EQ(problem_resolving("tpu"), "device");
  EXPECT_EQ(problem_resolving("cuda:x"), "device");
  EXPECT_EQ(problem_resolving("CPU"), "device");
}

TEST(Device, WithoutAGpuAutoIsTheCpuAndCudaIsRefused) {
  if (cuda_availability().devices > 0) GTEST_SKIP() << "this host has a CUDA device";
  EXPECT_FALSE(cuda_availability().why_not.empty());
  EXPECT_EQ(resolve_device("auto", 1, "runtime.device"), c10::Device(c10::kCPU));
  EXPECT_EQ(problem_resolving("cuda"), "no_cuda");
  EXPECT_EQ(problem_resolving("cuda:0"), "no_cuda");
}

TEST(Device, WithGpusARankTakesItsLocalRanksDevice) {
  const int devices = cuda_availability().devices;
  if (devices == 0) GTEST_SKIP() << "no CUDA device: " << cuda_availability().why_not;
  EXPECT_EQ(resolve_device("auto", 0, "runtime.device"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(resolve_device("cuda", devices - 1, "runtime.device"),
            c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(devices - 1)));
  EXPECT_EQ(resolve_device("cuda:0", 5, "runtime.device"), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(problem_resolving("cuda", devices), "device_index");
  EXPECT_EQ(problem_resolving("cuda:" + std::to_string(devices)), "device_index");
}

// What `import torch` does, done late: the wheel's CUDA library registers its hooks with ATen
// (its CUDA runtime answers), even where no driver is and no device can be used. ATen keeps the
// first hooks it was asked for: where a test before this one in the same process asked ATen about
// CUDA (at::manual_seed does, for CUDA's generators), the library still registers its hooks, but
// ATen answers with the CPU-only ones it gave first (core/device.h: why every question about
// CUDA goes through Loom's seam, and `loom train` asks it before seeding anything).
TEST(Device, TorchsCudaLibraryLoadsIntoACpuLinkedProcess) {
  if (torch_build().cuda.empty()) GTEST_SKIP() << "a CPU build of LibTorch has no CUDA library";
  std::string why_not;
  const bool registered = load_torch_cuda_library(&why_not);
  ASSERT_TRUE(at::CUDAHooksRegistry()->Has("CUDAHooks")) << why_not;
  if (!registered) {
    GTEST_SKIP() << "ATen answered a question about CUDA in this process before the library "
                    "loaded (run this test on its own, as ctest does): "
                 << why_not;
  }
  EXPECT_TRUE(at::detail::getCUDAHooks().hasCUDART());
  EXPECT_EQ(at::hasCUDA(), cuda_availability().devices > 0);
}

}  // namespace
}  // namespace loom
