// What this process may run on: usable cores (CPU affinity and cgroup CPU quota), and the
// instruction sets that decide precision (AVX-512 BF16, AMX). Read once at start-up and passed
// to whoever needs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/core/cpu_capability.h"

namespace loom {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;  // AMX tiles with bf16 (Sapphire Rapids and later)

  // True when the CPU computes bf16 matrix products natively, so bf16 autocast pays off.
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
};

struct Topology {
  int online_cores = 1;               // cores the machine has online
  int affinity_cores = 1;             // cores in this process's affinity mask
  std::optional<double> quota_cores;  // cgroup CPU quota in cores, when one is set
  int usable_cores = 1;               // min(affinity, ceil(quota)), at least 1
  uint64_t memory_bytes = 0;          // physical memory
  std::string cpu_model;
  CpuFeatures cpu;
  // The path Loom's kernels take (cpu_capability()): below avx512 when LOOM_CPU_CAPABILITY
  // lowers it, and then choices that depend on AVX-512 (bf16 autocast) are made as such a host
  // would make them.
  CpuCapability kernels = CpuCapability::kAvx512;
};

// Reads the affinity mask, the cgroup quota (v2 cpu.max, or v1 cfs quota) and CPUID.
Topology detect_topology();

// Parses cgroup v2 "cpu.max" content ("max 100000" or "150000 100000") into cores.
std::optional<double> parse_cgroup_cpu_max(const std::string& content);

// Cores usable given an affinity count and an optional quota: min(affinity, ceil(quota)), >= 1.
int usable_cores(int affinity_cores, std::optional<double> quota_cores);

// One line for logs: "2 usable cores (affinity 2, quota none), AVX-512 BF16".
std::string describe(const Topology& topology);

// This machine's hostname, or `fallback` when it cannot be read.
std::string host_name(const std::string& fallback = "localhost");

}  // namespace loom
