// Helpers shared by the tests: temporary directories, running the real `loom` binary, files.
#pragma once

#include <string>

#include "tools/build_paths.h"

namespace loom::test {

// How many times slower than a plain build this build runs. Tests that bound how quickly a
// failure is noticed, or that need one rank to fall behind another, scale their times by it:
// AddressSanitizer (make test-asan) slows every process two to four times.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kSlowdown = 3.0;
#else
constexpr double kSlowdown = 1.0;
#endif

// A fresh directory under /tmp, removed with its contents when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that killed it, or 0
  std::string output;  // stdout and stderr, interleaved
};

// Runs `sh -c "<command>"` and captures its output.
CommandResult run_command(const std::string& command);

// Runs the built `loom` binary with these arguments (a shell fragment) and optional
// environment assignments ("A=1 B=2").
CommandResult run_loom(const std::string& args, const std::string& env = "");

// A command running in the background (`sh -c "exec COMMAND"`), its output going to `log`.
// The destructor kills it (SIGKILL) if it still runs.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::string& command, const std::string& log);
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  int pid() const { return pid_; }
  void signal(int sig);
  // Waits for it to end: its exit code, or -(signal) when a signal killed it.
  int wait();

 private:
  int pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// A loopback TCP port nothing listens on now, outside the kernel's ephemeral range so that no
// port-0 listener or outgoing connection takes it before the caller binds it.
int free_port();

// Waits until `path` holds `part`; false after `seconds`.
bool wait_for_text(const std::string& path, const std::string& part, double seconds);

std::string read_text(const std::string& path);
// How many times `part` occurs in `text` (overlapping ones included).
int count_of(const std::string& text, const std::string& part);
void write_text(const std::string& path, const std::string& text);

// Writes one corrupt variant of a good JPEG of each kind a data set meets into `dir`:
// bad_empty.jpg (0 bytes) and bad_truncated.jpg (truncated), bad_magic.jpg (wrong magic) and
// bad_damaged.jpg (stray markers in the scan: undecodable), bad_bomb.jpg (a 30000x30000
// header: too large).
void write_corrupt_images(const std::string& dir, const std::string& good_jpeg);

// The Python of Loom's torch (LOOM_PYTHON), or "" when it has no torch to import.
std::string torch_python();

// Headless Chromium's path, or "" when it is not installed.
std::string chromium();
// The DOM of an HTML file after its scripts ran in headless Chromium (`profile_dir` holds the
// browser's profile).
CommandResult rendered_dom(const std::string& browser, const std::string& html,
                           const std::string& profile_dir);
// The same in a window `width` pixels wide (and 1000 high).
CommandResult rendered_dom(const std::string& browser, const std::string& html,
                           const std::string& profile_dir, int width);

// A configuration file that sets nothing: the defaults. `loom train --resume` without a file goes
// on with the run's own config.yaml; a test that moves a checkpoint to another layout names this
// file, so that its --set values alone say the new layout.
inline constexpr const char* kDefaultsOnly = "/dev/null";

// A small, fast synthetic-data configuration for e2e runs.
std::string tiny_synthetic_args();
// `--autotune` with one-step samples and the whole run allowed for tuning: quick, not precise.
std::string quick_autotune_args();

}  // namespace loom::test
