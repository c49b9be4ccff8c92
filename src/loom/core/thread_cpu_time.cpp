#include "loom/core/thread_cpu_time.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace loom {

double named_threads_cpu_seconds(const std::function<bool(const std::string& name)>& pick) {
  std::error_code error;
  std::filesystem::directory_iterator tasks("/proc/self/task", error);
  if (error) return 0;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  double seconds = 0;
  for (const auto& task : tasks) {
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    if (!pick(name)) continue;
    std::string stat;
    std::getline(std::ifstream(task.path() / "stat"), stat);
    // The name in field 2 may hold spaces: fields are counted after its closing parenthesis.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    double user = 0, system = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) user = std::stod(field);
      if (i == 15) system = std::stod(field);
    }
    seconds += (user + system) / tick;
  }
  return seconds;
}

}  // namespace loom
