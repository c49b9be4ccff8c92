#include "loom/core/termination.h"

#include <csignal>
#include <mutex>

namespace loom {
namespace {

// Lock-free, so the handler may set it (std::atomic<int> is on every platform Loom builds for).
std::atomic<int> termination_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_termination(int sig) { termination_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

const std::atomic<int>& catch_termination() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_handler = on_termination;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // blocking calls go on; the training loop polls the flag
    sigaction(SIGTERM, &action, nullptr);
  });
  return termination_signal;
}

}  // namespace loom
