// Checkpoints under faults: a writer killed at fifty random moments of its saves, and a file
// system that fills up. Either way the newest committed checkpoint must load, whole.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "loom/core/error.h"
#include "loom/train/checkpoint.h"
#include "tools/test_support.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;

// A checkpoint whose every value says which step wrote it: a mix of two saves would show.
CheckpointData checkpoint_of(int64_t step, int64_t floats) {
  CheckpointData d;
  d.position = {step, 0, step, step * 32};
  d.model = {{"w", at::full({floats}, static_cast<float>(step))}};
  d.optimizer = {{"w.momentum_buffer", at::full({floats}, -static_cast<float>(step))}};
  d.optimizer_kind = "sgd";
  d.rng_state = at::full({16}, static_cast<uint8_t>(step), at::kByte);
  d.config_json = "{}";
  return d;
}

void expect_whole(const CheckpointData& c) {
  const auto step = static_cast<float>(c.position.step);
  ASSERT_EQ(c.model.size(), 1u);
  EXPECT_TRUE(at::equal(c.model[0].second, at::full_like(c.model[0].second, step)));
  ASSERT_EQ(c.optimizer.size(), 1u);
  EXPECT_TRUE(at::equal(c.optimizer[0].second, at::full_like(c.optimizer[0].second, -step)));
}

// Hidden directories of unfinished saves or deletions: a kill that left one landed mid-save.
bool has_debris(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string()[0] == '.') return true;
  }
  return false;
}

TEST(CheckpointFaults, FiftyKillsDuringSavesLeaveTheNewestCommittedCheckpointWhole) {
  at::set_num_threads(1);  // no thread pool for the forked writers to inherit half-made
  test::TempDir dir;
  const std::string ckpt = dir / "ckpt";
  constexpr int64_t kFloats = 1 << 18;  // 1 MB per tensor
  double save_seconds = 0;
  {
    CheckpointStore store(ckpt, 2);
    const auto start = std::chrono::steady_clock::now();
    store.save(checkpoint_of(1, kFloats));
    save_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::mt19937 random(14);
  // Up to three saves' time: kills land in the first save, between saves, or in later ones.
  std::uniform_real_distribution<double> delay(0, 3 * save_seconds);
  int64_t newest = 1;
  int mid_save = 0;
  for (int kill = 0; kill < 50; ++kill) {
    const pid_t writer = fork();
    ASSERT_GE(writer, 0);
    if (writer == 0) {
      try {
        CheckpointStore store(ckpt, 2);
        for (int64_t step = newest + 1;; ++step) store.save(checkpoint_of(step, kFloats));
      } catch (...) {
        _exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay(random)));
    ::kill(writer, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(writer, &status, 0), writer);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed on its own (status " << status << ")";
    if (has_debris(ckpt)) ++mid_save;

    CheckpointStore store(ckpt, 2);
    const auto latest = store.latest();
    ASSERT_TRUE(latest.has_value()) << "kill " << kill;
    const CheckpointData back = CheckpointStore::load(*latest);
    EXPECT_GE(back.position.step, newest) << "kill " << kill << ": went back in time";
    expect_whole(back);
    newest = back.position.step;
    store.remove_unfinished();
    EXPECT_FALSE(has_debris(ckpt));
  }
  // The kills did land inside saves, not only between them.
  EXPECT_GE(mid_save, 10) << "of 50 kills; one save took " << save_seconds << " s";
}

// A tmpfs of `megabytes`, unmounted (lazily) at the end of the test.
class SmallFileSystem {
 public:
  SmallFileSystem(const std::string& path, int megabytes) : path_(path) {
    fs::create_directories(path);
    const std::string options = "size=" + std::to_string(megabytes) + "m";
    if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      error_ = std::strerror(errno);
    }
  }
  ~SmallFileSystem() {
    if (error_.empty()) ::umount2(path_.c_str(), MNT_DETACH);
  }
  const std::string& error() const { return error_; }

 private:
  std::string path_, error_;
};

int64_t free_bytes(const std::string& path) {
  struct statvfs s {};
  EXPECT_EQ(::statvfs(path.c_str(), &s), 0);
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

TEST(CheckpointFaults, AFullDiskFailsTheSaveNamingTheBytesAndKeepsThePreviousOne) {
  test::TempDir dir;
  SmallFileSystem small(dir / "small", 3);
  if (!small.error().empty()) GTEST_SKIP() << "cannot mount a tmpfs here: " << small.error();
  const std::string ckpt = dir / "small/ckpt";
  CheckpointStore store(ckpt, 3);
  constexpr int64_t kFloats = 1 << 18;  // two 1 MB tensors: one checkpoint fits, two do not
  const std::string first = store.save(checkpoint_of(1, kFloats));
  const int64_t free_after_first = free_bytes(ckpt);
  try {
    store.save(checkpoint_of(2, kFloats));
    FAIL() << "a second checkpoint fitted into 3 MB";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("checkpoint of step 2 in " + ckpt), std::string::npos) << message;
    EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
    EXPECT_NE(message.find("it needs about 2.2 MB ("), std::string::npos) << message;
    EXPECT_NE(message.find("bytes) free there"), std::string::npos) << message;
    EXPECT_NE(message.find("the previous checkpoint " + first + " is intact"), std::string::npos)
        << message;
  }
  // What the failed save wrote is gone again, and the first checkpoint is the latest, whole.
  EXPECT_FALSE(has_debris(ckpt));
  EXPECT_EQ(free_bytes(ckpt), free_after_first);
  ASSERT_EQ(store.latest(), first);
  expect_whole(CheckpointStore::load(first));
}

}  // namespace
}  // namespace loom::train
