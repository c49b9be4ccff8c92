#include "loom/train/autotune_session.h"

#include <gtest/gtest.h>

namespace loom::train {
namespace {

profile::AutotuneResult sample_result() {
  profile::AutotuneResult r;
  r.keys = {"data.workers", "runtime.threads", "data.prefetch_batches"};
  r.start = {1, 2, 4};
  r.chosen = {2, 1, 8};
  r.start_score = 410.5;
  r.chosen_score = 702.25;
  r.trials = {{"", false, {1, 2, 4}, {400, 410.5, 420}, 410.5},
              {"data.workers+runtime.threads", false, {2, 1, 4}, {650, 690, 700}, 690},
              {"data.prefetch_batches", true, {2, 1, 8}, {702.25, 690, 710}, 702.25}};
  r.steps = 37;
  r.seconds = 2.5;
  r.complete = true;
  return r;
}

// What a checkpoint keeps is what the resumed run reports: every field, keys in their order.
TEST(AutotuneJson, ReadsBackWhatItWrote) {
  const profile::AutotuneResult r = sample_result();
  const auto text = autotune_json(r).dump();
  const profile::AutotuneResult back = autotune_from_json(nlohmann::ordered_json::parse(text));
  EXPECT_EQ(back.keys, r.keys);
  EXPECT_EQ(back.start, r.start);
  EXPECT_EQ(back.chosen, r.chosen);
  EXPECT_EQ(back.start_score, r.start_score);
  EXPECT_EQ(back.chosen_score, r.chosen_score);
  EXPECT_EQ(back.steps, r.steps);
  EXPECT_EQ(back.seconds, r.seconds);
  EXPECT_EQ(back.complete, r.complete);
  ASSERT_EQ(back.trials.size(), r.trials.size());
  for (size_t i = 0; i < r.trials.size(); ++i) {
    EXPECT_EQ(back.trials[i].key, r.trials[i].key);
    EXPECT_EQ(back.trials[i].recheck, r.trials[i].recheck);
    EXPECT_EQ(back.trials[i].settings, r.trials[i].settings);
    EXPECT_EQ(back.trials[i].sample_rates, r.trials[i].sample_rates);
    EXPECT_EQ(back.trials[i].score, r.trials[i].score);
  }
  EXPECT_EQ(autotune_json(back).dump(), text);
  EXPECT_THROW(autotune_from_json(nlohmann::ordered_json::parse(R"({"start": {}})")),
               nlohmann::json::exception);
}

}  // namespace
}  // namespace loom::train
