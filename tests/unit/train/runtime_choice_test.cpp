#include "loom/train/runtime_choice.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

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
    AutocastScope scope(true);
    EXPECT_EQ(at::mm(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
  AutocastScope off(false);
  EXPECT_EQ(at::mm(a, b).scalar_type(), at::kFloat);
}

}  // namespace
}  // namespace loom::train
