// CPU time of the calling thread: what a loader thread's work cost, whatever else ran on its core.
#pragma once

#include <ctime>

namespace loom {

inline double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace loom
