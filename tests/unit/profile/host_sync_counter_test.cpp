// The host synchronisations of a GPU step, counted from torch's warnings: by phase inside the
// steps that count, nothing between steps, other warnings passed on; and torch's own switch and
// warning, reached in its CUDA library on a host without a GPU.
#include "loom/profile/host_sync_counter.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/core/cuda_sync_warnings.h"
#include "loom/core/torch_build.h"

namespace loom::profile {
namespace {

struct RecordingHandler : c10::WarningHandler {
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

void warn_of_a_sync() { TORCH_WARN(cuda_sync_warning_text()); }

TEST(HostSyncCounter, CountsTheStepsSynchronisationsByPhaseAndPassesOtherWarningsOn) {
  RecordingHandler before;
  const c10::WarningUtils::WarningHandlerGuard guard(&before);
  std::vector<bool> switched;
  {
    HostSyncCounter counter([&](bool on) {
      switched.push_back(on);
      return true;
    });
    EXPECT_TRUE(counter.counting());
    warn_of_a_sync();  // between steps: the run's own read
    for (const bool steady : {false, true, true}) {
      counter.begin_step();
      warn_of_a_sync();  // before any phase: other
      counter.enter(Phase::kForward);
      counter.enter(Phase::kBackward);
      warn_of_a_sync();
      warn_of_a_sync();
      TORCH_WARN("something else");
      counter.enter(Phase::kOptimizer);
      warn_of_a_sync();
      counter.end_step(steady);
    }
    const HostSyncs& totals = counter.totals();
    EXPECT_EQ(totals.steps, 2);
    EXPECT_EQ(totals.by_phase[static_cast<size_t>(Phase::kOther)], 2);
    EXPECT_EQ(totals.by_phase[static_cast<size_t>(Phase::kForward)], 0);
    EXPECT_EQ(totals.by_phase[static_cast<size_t>(Phase::kBackward)], 4);
    EXPECT_EQ(totals.by_phase[static_cast<size_t>(Phase::kOptimizer)], 2);
    EXPECT_EQ(totals.total(), 8);
    EXPECT_EQ(totals.per_step(), 4.0);
  }
  EXPECT_EQ(switched, (std::vector<bool>{true, false}));
  EXPECT_EQ(before.messages, std::vector<std::string>(3, "something else"));
  // The handler before it is back.
  warn_of_a_sync();
  EXPECT_EQ(before.messages.size(), 4u);
}

// Where the switch cannot be reached, nothing is counted and it is not turned off again.
TEST(HostSyncCounter, WithoutTheSwitchNothingIsCounted) {
  std::vector<bool> switched;
  {
    HostSyncCounter counter([&](bool on) {
      switched.push_back(on);
      return false;
    });
    EXPECT_FALSE(counter.counting());
  }
  EXPECT_EQ(switched, std::vector<bool>{true});
}

// torch's own warning function (c10::cuda::warn_or_error_on_sync, what its synchronising
// operations call) warns through the counter once the switch is on, and is silent once it is
// off: the switch is the one torch reads. Needs no GPU, only torch's CUDA library.
TEST(HostSyncCounter, TorchsOwnSynchronisationWarningIsCounted) {
  if (torch_build().cuda.empty()) GTEST_SKIP() << "a CPU build of LibTorch has no CUDA library";
  std::string why_not;
  ASSERT_TRUE(set_cuda_sync_warnings(false, &why_not)) << why_not;
  using Warn = void (*)();
  const auto torch_warns =
      reinterpret_cast<Warn>(::dlsym(RTLD_DEFAULT, "_ZN3c104cuda21warn_or_error_on_syncEv"));
  ASSERT_NE(torch_warns, nullptr) << ::dlerror();
  RecordingHandler before;
  const c10::WarningUtils::WarningHandlerGuard guard(&before);
  {
    HostSyncCounter counter([](bool on) { return set_cuda_sync_warnings(on); });
    ASSERT_TRUE(counter.counting());
    counter.begin_step();
    counter.enter(Phase::kForward);
    torch_warns();
    counter.end_step(true);
    EXPECT_EQ(counter.totals().by_phase[static_cast<size_t>(Phase::kForward)], 1);
  }
  torch_warns();  // off again: no warning
  EXPECT_TRUE(before.messages.empty());
}

}  // namespace
}  // namespace loom::profile
