#include "loom/train/runtime_choice.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "loom/core/device.h"
#include "loom/core/error.h"

namespace loom::train {
namespace {

Topology machine(bool avx512_bf16, bool amx, int cores) {
  Topology t;
  t.cpu.avx512f = avx512_bf16;
  t.cpu.avx512_bf16 = avx512_bf16;
  t.cpu.amx_bf16 = amx;
  t.usable_cores = cores;
  return t;
}

TEST(RuntimeChoice, AutoPicksBf16OnlyWithNativeSupportAndOneDnn) {
  RuntimeConfig cfg;
  EXPECT_EQ(choose_runtime(cfg, machine(true, false, 2), true, true).precision, "bf16");
  EXPECT_EQ(choose_runtime(cfg, machine(false, true, 2), true, true).precision, "bf16");
  EXPECT_EQ(choose_runtime(cfg, machine(false, true, 2), true, true).precision_reason,
            "CPU has AMX-BF16");
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), true, true).precision, "fp32");
  EXPECT_EQ(choose_runtime(cfg, machine(true, false, 2), true, false).precision, "fp32");
  // LOOM_CPU_CAPABILITY=avx2 on the same CPU: chosen as an AVX2 host would.
  Topology lowered = machine(true, false, 2);
  lowered.kernels = CpuCapability::kAvx2;
  EXPECT_EQ(choose_runtime(cfg, lowered, true, true).precision, "fp32");
  EXPECT_EQ(choose_runtime(cfg, lowered, true, true).precision_reason,
            "LOOM_CPU_CAPABILITY is below avx512");
  cfg.precision = "bf16";
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), true, true).precision, "bf16");
}

TEST(RuntimeChoice, AutoLayoutFollowsTheModel) {
  RuntimeConfig cfg;
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), true, true).memory_format,
            "channels_last");
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), false, true).memory_format, "contiguous");
  cfg.memory_format = "contiguous";
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), true, true).memory_format, "contiguous");
}

TEST(RuntimeChoice, AutoThreadsAreTheUsableCores) {
  RuntimeConfig cfg;
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 6), true, true).threads, 6);
  cfg.threads = 3;
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 6), true, true).threads, 3);
}

TEST(AutocastScope, RunsMatmulInBf16AndRestores) {
  at::Tensor a = at::randn({4, 4}), b = at::randn({4, 4});
  {
    AutocastScope scope(at::kBFloat16);
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  AutocastScope off(at::kFloat);
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
}

TEST(AutocastScope, TurnsOnBothDeviceTypesAndAStateScopeRestoresExactly) {
  {
    AutocastScope bf16(at::kBFloat16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCUDA));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCUDA), at::kBFloat16);
    // A block that must run in fp32 inside it, then bf16 again.
    {
      AutocastScope off{AutocastState{}};
      EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
      EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
    }
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCUDA));
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));
}

TEST(RuntimeChoice, AGpuComputesInBf16UnlessTold) {
  RuntimeConfig cfg;
  DeviceChoice gpu;
  gpu.device = c10::Device(c10::kCUDA, 1);
  gpu.compute_capability = 90;  // an H100
  const RuntimeChoice on_gpu = choose_runtime(cfg, machine(false, false, 2), true, true, gpu);
  EXPECT_EQ(on_gpu.device, "cuda:1");
  EXPECT_EQ(on_gpu.torch_device(), gpu.device);
  EXPECT_EQ(on_gpu.precision, "bf16");
  EXPECT_EQ(on_gpu.precision_reason, "GPU");
  EXPECT_TRUE(on_gpu.native_bf16);
  cfg.precision = "fp32";
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), true, true, gpu).precision, "fp32");
  EXPECT_EQ(choose_runtime(cfg, machine(false, false, 2), true, true).device, "cpu");
}

// Before Ampere (8.0) a GPU has no bf16 tensor cores (cuDNN no bf16 convolutions): auto is fp16
// with loss scaling where it has fp16 ones (Volta, Turing), fp32 before them and where the
// capability could not be read.
TEST(RuntimeChoice, AGpuWithoutBf16TensorCoresComputesInFp16OrFp32) {
  RuntimeConfig cfg;
  DeviceChoice gpu;
  gpu.device = c10::Device(c10::kCUDA, 0);
  for (const auto& [capability, precision] : std::vector<std::pair<int, std::string>>{
           {75, "fp16"}, {70, "fp16"}, {61, "fp32"}, {0, "fp32"}}) {
    SCOPED_TRACE(capability);
    gpu.compute_capability = capability;
    // A host CPU with native bf16 changes nothing: the GPU computes.
    const RuntimeChoice c = choose_runtime(cfg, machine(true, true, 2), true, true, gpu);
    EXPECT_EQ(c.precision, precision);
    EXPECT_EQ(c.loss_scaling(), precision == "fp16");
    EXPECT_EQ(c.autocast_dtype(), precision == "fp16" ? at::kHalf : at::kFloat);
    EXPECT_FALSE(c.native_bf16);
  }
  gpu.compute_capability = 80;
  const RuntimeChoice ampere = choose_runtime(cfg, machine(false, false, 2), true, true, gpu);
  EXPECT_EQ(ampere.precision, "bf16");
  EXPECT_EQ(ampere.autocast_dtype(), at::kBFloat16);
  EXPECT_FALSE(ampere.loss_scaling());
}

TEST(RuntimeChoice, TheDeviceComesWithItsReason) {
  RuntimeConfig cfg;
  EXPECT_EQ(choose_device(cfg, 0).device, c10::Device(c10::kCPU));
  EXPECT_EQ(choose_device(cfg, 0).reason, "set in runtime.device");
  cfg.device = "auto";
  const DeviceChoice chosen = choose_device(cfg, 0);
  EXPECT_EQ(chosen.reason.rfind("auto: ", 0), 0u) << chosen.reason;
  EXPECT_EQ(chosen.device.is_cuda(), cuda_availability().devices > 0);
  cfg.device = "tpu";
  try {
    choose_device(cfg, 0);
    ADD_FAILURE() << "tpu was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "runtime.device");
    EXPECT_EQ(e.field("problem"), "device");
  }
}

}  // namespace
}  // namespace loom::train
