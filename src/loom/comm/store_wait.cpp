#include "loom/comm/store_wait.h"

#include <algorithm>
#include <thread>

namespace loom::comm {

std::vector<std::size_t> wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  std::vector<std::size_t> missing;
  while (true) {
    missing.clear();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!store.check({keys[i]})) missing.push_back(i);
    }
    if (missing.empty() || std::chrono::steady_clock::now() > deadline) return missing;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace loom::comm
