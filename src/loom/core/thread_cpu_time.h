// CPU time of threads and of the process: what a loader thread's or a parameter server's work
// cost, whatever else ran on its cores.
#pragma once

#include <ctime>
#include <functional>
#include <string>

namespace loom {

// The calling thread's.
inline double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// User + system time of the whole process (all threads).
inline double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Summed over this process's live threads whose name (as `ps -L` shows it, at most 15
// characters) `pick` accepts: for threads a library starts, which cannot be asked directly.
// Read from /proc/self/task, to the kernel's tick (10 ms); 0 where /proc is missing.
double named_threads_cpu_seconds(const std::function<bool(const std::string& name)>& pick);

}  // namespace loom
