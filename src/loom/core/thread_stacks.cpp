#include "loom/core/thread_stacks.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {
namespace {

constexpr int kMaxFrames = 48;

// Where the signalled thread writes its frames. Allocated per thread asked and freed only once
// that thread has answered: a late answer must not land in freed memory.
struct Capture {
  pid_t thread = 0;  // the one asked; a late answer from another thread leaves it alone
  void* frames[kMaxFrames];
  int depth = 0;
  std::atomic<bool> done{false};
};

std::atomic<Capture*> pending{nullptr};

void on_stack_request(int) {
  Capture* capture = pending.load();
  if (!capture || capture->thread != static_cast<pid_t>(syscall(SYS_gettid)) ||
      !pending.compare_exchange_strong(capture, nullptr)) {
    return;
  }
  capture->depth = backtrace(capture->frames, kMaxFrames);
  capture->done.store(true, std::memory_order_release);
}

std::vector<pid_t> thread_ids() {
  std::vector<pid_t> ids;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ids.push_back(static_cast<pid_t>(std::atoi(entry->d_name)));
    }
    closedir(dir);
  }
  return ids;
}

std::string thread_name(pid_t tid) {
  std::string name;
  std::ifstream("/proc/self/task/" + std::to_string(tid) + "/comm") >> name;
  return name;
}

std::string describe_frame(void* address) {
  char line[64];
  std::snprintf(line, sizeof line, "%p", address);
  std::string text = line;
  Dl_info info{};
  if (!dladdr(address, &info) || !info.dli_fname) return text;
  std::string file = info.dli_fname;
  file = file.substr(file.rfind('/') + 1);
  if (info.dli_sname) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    text += std::string(" ") + (status == 0 && demangled ? demangled : info.dli_sname);
    std::free(demangled);
    return text + " (" + file + ")";
  }
  std::snprintf(
      line, sizeof line, "+0x%zx",
      static_cast<size_t>(static_cast<char*>(address) - static_cast<char*>(info.dli_fbase)));
  return text + " " + file + line;
}

std::string format_stack(pid_t tid, void* const* frames, int depth) {
  std::string text = "thread " + std::to_string(tid) + " (" + thread_name(tid) + "):\n";
  for (int i = 0; i < depth; ++i) {
    text += "  #" + std::to_string(i) + " " + describe_frame(frames[i]) + "\n";
  }
  return text;
}

}  // namespace

std::string all_thread_stacks() {
  static std::mutex one_dump_at_a_time;
  std::lock_guard<std::mutex> lock(one_dump_at_a_time);
  const int sig = SIGRTMIN + 4;  // glibc keeps the first real-time signals for itself
  void* warm_up[1];
  backtrace(warm_up, 1);  // loads libgcc's unwinder here rather than inside a handler
  struct sigaction action {};
  action.sa_handler = on_stack_request;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(sig, &action, nullptr);

  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  std::string text;
  for (pid_t tid : thread_ids()) {
    if (tid == self) {
      void* frames[kMaxFrames];
      text += format_stack(tid, frames, backtrace(frames, kMaxFrames));
      continue;
    }
    auto* capture = new Capture;
    capture->thread = tid;
    pending.store(capture);
    if (syscall(SYS_tgkill, getpid(), tid, sig) != 0) {  // the thread has just ended
      pending.store(nullptr);
      delete capture;
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (!capture->done.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (capture->done.load(std::memory_order_acquire)) {
      text += format_stack(tid, capture->frames, capture->depth);
      delete capture;
    } else if (pending.exchange(nullptr) == capture) {  // never picked up: the signal is blocked
      text += "thread " + std::to_string(tid) + " (" + thread_name(tid) +
              "): did not answer (it blocks the signal)\n";
      delete capture;
    } else {  // picked up but not finished in time: leave it to the thread
      text += "thread " + std::to_string(tid) + " (" + thread_name(tid) +
              "): did not finish its stack in time\n";
    }
  }
  return text;
}

}  // namespace loom
