#include "loom/profile/host_load.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "loom/core/thread_cpu_time.h"

namespace loom::profile {
namespace {

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

std::optional<CoreTimes> parse_proc_stat(const std::string& text, const std::vector<int>& cpus,
                                         double ticks_per_second) {
  if (cpus.empty() || ticks_per_second <= 0) return std::nullopt;
  CoreTimes times;
  std::size_t found = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; the "cpu" line
    // sums every core, and guest time is already in user.
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    if (!fields || std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    ++found;
    times.busy_seconds += (user + nice + system + irq + softirq) / ticks_per_second;
    times.steal_seconds += steal / ticks_per_second;
  }
  if (found != cpus.size()) return std::nullopt;
  return times;
}

std::optional<HostLoad::Reading> HostLoad::read() const {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto cores =
      parse_proc_stat(text.str(), cpus_, static_cast<double>(::sysconf(_SC_CLK_TCK)));
  if (!cores) return std::nullopt;
  return Reading{*cores, process_cpu_seconds(), std::chrono::steady_clock::now()};
}

void HostLoad::start() {
  cpus_ = affinity_cpus();
  start_ = read();
}

std::optional<HostLoad::Share> HostLoad::share() const {
  if (!start_) return std::nullopt;
  const std::optional<Reading> now = read();
  if (!now) return std::nullopt;
  const double wall = std::chrono::duration<double>(now->at - start_->at).count();
  if (wall <= 0) return std::nullopt;
  const double busy = now->cores.busy_seconds - start_->cores.busy_seconds;
  const double own = now->process_cpu_seconds - start_->process_cpu_seconds;
  Share s;
  // Ticks are sampled: a core the process kept busy alone can read a little under its own time.
  s.other_cores = std::max(0.0, busy - own) / wall;
  s.stolen_cores = std::max(0.0, now->cores.steal_seconds - start_->cores.steal_seconds) / wall;
  return s;
}

}  // namespace loom::profile
