#include "loom/core/topology.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace loom {
namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tightest quota along this process's cgroup v2 path: a parent's limit binds its children.
std::optional<double> cgroup_v2_quota() {
  auto self = read_file("/proc/self/cgroup");
  if (!self) return std::nullopt;
  std::string path;
  std::istringstream lines(*self);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  }
  std::optional<double> tightest;
  for (;;) {
    if (auto content = read_file("/sys/fs/cgroup" + path + "/cpu.max")) {
      if (auto q = parse_cgroup_cpu_max(*content)) {
        tightest = tightest ? std::min(*tightest, *q) : *q;
      }
    }
    if (path.empty() || path == "/") break;
    path = path.substr(0, path.find_last_of('/'));
  }
  return tightest;
}

std::optional<double> cgroup_v1_quota() {
  auto quota = read_file("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us");
  auto period = read_file("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  double q = std::atof(quota->c_str());
  double p = std::atof(period->c_str());
  if (q <= 0 || p <= 0) return std::nullopt;
  return q / p;
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  // The OS must save the wider registers on context switch, or the instructions are unusable.
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG | XTILEDATA
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = os_avx && (ebx & (1u << 5));
  f.avx512f = os_avx512 && (ebx & (1u << 16));
  f.amx_bf16 = os_amx && (edx & (1u << 22)) && (edx & (1u << 24));
  unsigned max_subleaf = eax;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx512_bf16 = f.avx512f && (eax & (1u << 5));
  }
#endif
  return f;
}

std::string cpu_model_name() {
  auto info = read_file("/proc/cpuinfo");
  if (!info) return "unknown";
  std::istringstream lines(*info);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

}  // namespace

std::optional<double> parse_cgroup_cpu_max(const std::string& content) {
  std::istringstream in(content);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  double q = std::atof(quota.c_str());
  if (q <= 0) return std::nullopt;
  return q / period;
}

int usable_cores(int affinity_cores, std::optional<double> quota_cores) {
  int cores = std::max(1, affinity_cores);
  if (quota_cores) cores = std::min(cores, static_cast<int>(std::ceil(*quota_cores - 1e-9)));
  return std::max(1, cores);
}

Topology detect_topology() {
  Topology t;
  t.online_cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t mask;
  CPU_ZERO(&mask);
  t.affinity_cores =
      sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : t.online_cores;
  t.quota_cores = cgroup_v2_quota();
  if (!t.quota_cores) t.quota_cores = cgroup_v1_quota();
  t.usable_cores = usable_cores(t.affinity_cores, t.quota_cores);
  t.memory_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                   static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  t.cpu_model = cpu_model_name();
  t.cpu = detect_cpu_features();
  t.kernels = cpu_capability();
  return t;
}

std::string describe(const Topology& t) {
  std::ostringstream s;
  s << t.usable_cores << " usable cores (affinity " << t.affinity_cores << " of " << t.online_cores
    << ", quota ";
  if (t.quota_cores) {
    s << *t.quota_cores;
  } else {
    s << "none";
  }
  s << "), " << t.cpu_model;
  if (t.cpu.amx_bf16) s << ", AMX-BF16";
  if (t.cpu.avx512_bf16) s << ", AVX-512 BF16";
  if (!t.cpu.native_bf16()) s << ", no native bf16";
  return s.str();
}

std::string host_name(const std::string& fallback) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return fallback;
  return host;
}

}  // namespace loom
