// What else ran on this process's cores while it trained: the kernel's per-core busy time
// (/proc/stat's cpuN lines, for the cores in the affinity mask) less the process's own CPU time,
// and the time a hypervisor gave those virtual cores to other guests (steal). A run whose steps
// slow down now and then on a host that others use shows it here; the advisor's
// unsteady_throughput names the shared host only on this evidence.
//
// /proc/stat counts in the kernel's ticks (10 ms): over a run of seconds the error is a few
// hundredths of a core.
//
// Not thread-safe: one reader.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace loom::profile {

// Busy (user, nice, system, irq, softirq) and steal seconds summed over `cpus`, from
// /proc/stat's text; nullopt when a listed cpu has no line. `ticks_per_second`: USER_HZ.
struct CoreTimes {
  double busy_seconds = 0;
  double steal_seconds = 0;
};
std::optional<CoreTimes> parse_proc_stat(const std::string& text, const std::vector<int>& cpus,
                                         double ticks_per_second);

class HostLoad {
 public:
  // What others used on the cores, in cores' worth on average (CPU seconds per second).
  struct Share {
    double other_cores = 0;   // busy time that was not this process's (its other ranks' too)
    double stolen_cores = 0;  // steal
  };

  // Reads the cores' times now; from then on share() measures.
  void start();
  bool started() const { return start_.has_value(); }
  // Since start(); nullopt before it, or where /proc/stat cannot be read.
  std::optional<Share> share() const;

 private:
  struct Reading {
    CoreTimes cores;
    double process_cpu_seconds = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::optional<Reading> read() const;

  std::vector<int> cpus_;  // the affinity mask's, at start()
  std::optional<Reading> start_;
};

}  // namespace loom::profile
