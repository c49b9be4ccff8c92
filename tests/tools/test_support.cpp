#include "tools/test_support.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace loom::test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "loom-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    // sh reports a child killed by signal N as exit status 128 + N.
    if (result.exit_code > 128 && result.exit_code < 160) {
      result.signal = result.exit_code - 128;
      result.exit_code = -1;
    }
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

CommandResult run_loom(const std::string& args, const std::string& env) {
  return run_command(env + (env.empty() ? "" : " ") + test::loom_binary() + " " + args);
}

BackgroundProcess::BackgroundProcess(const std::string& command, const std::string& log) {
  const std::string line = "exec " + command + " > '" + log + "' 2>&1";
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed for: " + command);
  if (pid_ == 0) {
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
}

BackgroundProcess::~BackgroundProcess() {
  if (reaped_) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status_, 0);
}

void BackgroundProcess::signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

int BackgroundProcess::wait() {
  if (!reaped_) {
    ::waitpid(pid_, &status_, 0);
    reaped_ = true;
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : -WTERMSIG(status_);
}

int free_port() {
  // Below the kernel's ephemeral range (32768-60999 on Debian): a port the kernel picked would be
  // free only until some other test's outgoing connection or port-0 listener is given it, between
  // this check and the caller's bind. Ports here are only ever taken by name, and a random start
  // keeps concurrent tests apart.
  constexpr int kFirst = 20000, kCount = 12000;
  static std::atomic<unsigned> calls{0};
  const unsigned start =
      static_cast<unsigned>(::getpid()) * 7919u +
      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()) +
      calls.fetch_add(1) * 101u;
  for (int attempt = 0; attempt < kCount; ++attempt) {
    const int port = kFirst + static_cast<int>((start + static_cast<unsigned>(attempt)) % kCount);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (bound) return port;
  }
  throw std::runtime_error("free_port: no free loopback port in 20000-31999");
}

bool wait_for_text(const std::string& path, const std::string& part, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const std::string text = read_text(path);
    if (!text.empty() && text.find(part) != std::string::npos) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

void write_corrupt_images(const std::string& dir, const std::string& good) {
  write_text(dir + "/bad_empty.jpg", "");
  write_text(dir + "/bad_truncated.jpg", good.substr(0, good.size() / 3));
  write_text(dir + "/bad_magic.jpg", "BM" + good.substr(2));
  std::string bomb = good;
  const size_t frame = bomb.find("\xFF\xC0");  // baseline frame header: height, width at +5, +7
  for (size_t at : {frame + 5, frame + 7}) {
    bomb[at] = static_cast<char>(30000 >> 8);
    bomb[at + 1] = static_cast<char>(30000 & 0xFF);
  }
  write_text(dir + "/bad_bomb.jpg", bomb);
  // Damage inside the entropy-coded data that a decoder can detect: stray markers. (JPEG has
  // no checksum; a flip that still decodes to valid codes cannot be told from real content.)
  std::string damaged = good;
  for (size_t i = damaged.size() / 2; i < damaged.size() / 2 + 32; i += 2) {
    damaged[i] = '\xFF';
    damaged[i + 1] = '\xD9';
  }
  write_text(dir + "/bad_damaged.jpg", damaged);
}

std::string torch_python() {
  // Asked once per process, and without importing torch: an import costs 2-3 s of a core, and
  // the engine tests ask for every command they build.
  static const std::string found = [] {
    const std::string python = test::test_python();
    if (python.empty()) return std::string();
    const auto probe = run_command(
        python +
        " -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(\"torch\") is None)'");
    return probe.exit_code == 0 ? python : std::string();
  }();
  return found;
}

std::string tiny_synthetic_args() {
  return "--set data=synthetic --set data.image_size=16 --set data.channels=3 "
         "--set data.classes=4 --set data.train_samples=256 --set data.test_samples=64 "
         "--set data.batch_size=16 --set runtime.threads=1 --set train.log_every=4 "
         "--set schedule.warmup_steps=2";
}

std::string quick_autotune_args() {
  return "--autotune --set autotune.samples=3 --set autotune.sample_steps=1 "
         "--set autotune.sample_seconds=0 --set autotune.warmup_steps=1 "
         "--set autotune.max_share=1";
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string chromium() {
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (run_command(std::string("test -x ") + path).exit_code == 0) return path;
  }
  return "";
}

CommandResult rendered_dom(const std::string& browser, const std::string& html,
                           const std::string& profile_dir) {
  return run_command(browser + " --headless --no-sandbox --disable-gpu --user-data-dir=" +
                     profile_dir + " --dump-dom file://" + html + " 2>/dev/null");
}

CommandResult rendered_dom(const std::string& browser, const std::string& html,
                           const std::string& profile_dir, int width) {
  return run_command(browser + " --headless --no-sandbox --disable-gpu --user-data-dir=" +
                     profile_dir + " --window-size=" + std::to_string(width) +
                     ",1000 --dump-dom file://" + html + " 2>/dev/null");
}

}  // namespace loom::test
