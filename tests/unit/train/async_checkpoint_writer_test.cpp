// Checkpoints written in the background: what is written is the copy start() made (the live
// tensors may change at once), the host buffers are reused, tensors to fetch are fetched before
// start() returns, and a failed write is an outcome that leaves the previous checkpoint.
#include "loom/train/async_checkpoint_writer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/core/error.h"
#include "tools/test_support.h"

namespace loom::train {
namespace {

CheckpointData make_checkpoint(int64_t step, const at::Tensor& w, const at::Tensor& momentum) {
  CheckpointData d;
  d.position = {step, 0, step, step * 8};
  d.model = {{"w", w}, {"b", at::full({3}, static_cast<float>(step))}};
  d.optimizer = {{"w.momentum_buffer", momentum}};
  d.optimizer_kind = "sgd";
  d.rng_state = at::arange(16, at::kByte);
  d.config_json = R"({"seed":1})";
  return d;
}

TEST(AsyncCheckpointWriter, WritesTheCopyMadeAtStartWhileTrainingChangesTheTensors) {
  test::TempDir dir;
  // The writer pauses halfway: the tensors change while it writes.
  CheckpointStore store(dir / "ckpt", 3, /*kill_in_save_step=*/0, /*pause_in_save_ms=*/200);
  AsyncCheckpointWriter writer(store);
  at::Tensor w = at::arange(6, at::kFloat).reshape({2, 3});
  at::Tensor momentum = at::ones({2, 3});
  writer.start(make_checkpoint(10, w, momentum));
  EXPECT_TRUE(writer.running());
  EXPECT_FALSE(writer.poll().has_value());  // still writing
  // The next optimizer step, in place.
  w.add_(100);
  momentum.mul_(3);
  const std::optional<AsyncWriteResult> result = writer.wait();
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->committed()) << result->error;
  EXPECT_EQ(result->step, 10);
  EXPECT_GE(result->background_seconds, 0.2);
  EXPECT_EQ(result->path, *store.latest());
  EXPECT_FALSE(writer.wait().has_value());  // taken

  const CheckpointData back = CheckpointStore::load(result->path);
  EXPECT_EQ(back.position.step, 10);
  ASSERT_EQ(back.model.size(), 2u);
  EXPECT_EQ(back.model[0].first, "w");
  EXPECT_TRUE(back.model[0].second.equal(at::arange(6, at::kFloat).reshape({2, 3})));
  ASSERT_EQ(back.optimizer.size(), 1u);
  EXPECT_TRUE(back.optimizer[0].second.equal(at::ones({2, 3})));
  EXPECT_TRUE(back.rng_state.equal(at::arange(16, at::kByte)));
}

TEST(AsyncCheckpointWriter, ReusesItsHostBuffersFromOneCheckpointToTheNext) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", 2);
  AsyncCheckpointWriter writer(store);
  at::Tensor w = at::zeros({4, 5});
  at::Tensor momentum = at::zeros({4, 5});
  writer.start(make_checkpoint(1, w, momentum));
  ASSERT_TRUE(writer.wait()->committed());
  // w, b, the momentum and the generator state.
  EXPECT_EQ(writer.buffer_allocations(), 4);
  EXPECT_EQ(writer.buffer_bytes(), (20 + 3 + 20) * 4 + 16);
  for (int64_t step = 2; step <= 4; ++step) {
    w.fill_(static_cast<float>(step));
    writer.start(make_checkpoint(step, w, momentum));
    ASSERT_TRUE(writer.wait()->committed());
    EXPECT_TRUE(CheckpointStore::load(*store.latest()).model[0].second.equal(w));
  }
  EXPECT_EQ(writer.buffer_allocations(), 4);  // none made after the first checkpoint
  // A tensor of another shape gets a buffer of its own; the one it replaces goes.
  writer.start(make_checkpoint(5, at::zeros({7}), momentum));
  ASSERT_TRUE(writer.wait()->committed());
  EXPECT_EQ(writer.buffer_allocations(), 5);
  EXPECT_EQ(writer.buffer_bytes(), (7 + 3 + 20) * 4 + 16);
  EXPECT_EQ(store.list().size(), 2u);  // pruned as a synchronous save prunes
}

TEST(AsyncCheckpointWriter, FetchesTensorsToFetchBeforeStartReturnsAndKeepsTheirOrder) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", 3, 0, /*pause_in_save_ms=*/100);
  AsyncCheckpointWriter writer(store);
  CheckpointData data = make_checkpoint(3, at::zeros({2}), at::zeros({2}));
  int fetched = 0;
  for (const char* name : {"later.a", "later.b"}) {
    data.model_to_fetch.push_back({name, at::kFloat, {2}, [&fetched] {
                                     ++fetched;
                                     return at::full({2}, static_cast<float>(fetched));
                                   }});
  }
  writer.start(std::move(data));
  EXPECT_EQ(fetched, 2);  // the other ranks' sends complete at the step boundary
  ASSERT_TRUE(writer.wait()->committed());
  const CheckpointData back = CheckpointStore::load(*store.latest());
  ASSERT_EQ(back.model.size(), 4u);
  EXPECT_EQ(back.model[2].first, "later.a");
  EXPECT_TRUE(back.model[2].second.equal(at::full({2}, 1.0f)));
  EXPECT_EQ(back.model[3].first, "later.b");
  EXPECT_TRUE(back.model[3].second.equal(at::full({2}, 2.0f)));
}

TEST(AsyncCheckpointWriter, StartsOnlyOnceThePreviousOutcomeIsTaken) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", 3, 0, /*pause_in_save_ms=*/100);
  AsyncCheckpointWriter writer(store);
  writer.start(make_checkpoint(1, at::zeros({2}), at::zeros({2})));
  try {
    writer.start(make_checkpoint(2, at::zeros({2}), at::zeros({2})));
    FAIL() << "a second write started while the first was in flight";
  } catch (const Error& e) {
    EXPECT_EQ(e.field("problem"), "in_flight");
    EXPECT_EQ(e.field("in_flight_step"), "1");
  }
  ASSERT_TRUE(writer.wait()->committed());
  writer.start(make_checkpoint(2, at::zeros({2}), at::zeros({2})));
  ASSERT_TRUE(writer.wait()->committed());
  EXPECT_EQ(std::filesystem::path(*store.latest()).filename(), "step-00000002");
}

TEST(AsyncCheckpointWriter, AFailedWriteIsAnOutcomeAndThePreviousCheckpointStays) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", 3);
  AsyncCheckpointWriter writer(store);
  writer.start(make_checkpoint(1, at::zeros({2}), at::zeros({2})));
  ASSERT_TRUE(writer.wait()->committed());
  CheckpointData bad = make_checkpoint(2, at::zeros({2}), at::zeros({2}));
  bad.config_json = "{";  // the manifest cannot be written
  writer.start(std::move(bad));
  const std::optional<AsyncWriteResult> result = writer.wait();
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(result->committed());
  EXPECT_TRUE(result->path.empty());
  EXPECT_NE(result->error.find("checkpoint of step 2 in " + (dir / "ckpt")), std::string::npos)
      << result->error;
  EXPECT_NE(result->error.find("step-00000001 is intact"), std::string::npos) << result->error;
  EXPECT_EQ(std::filesystem::path(*store.latest()).filename(), "step-00000001");
  // Nothing of the failed write is left behind; the next one goes ahead.
  for (const auto& entry : std::filesystem::directory_iterator(dir / "ckpt")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << entry.path();
  }
  writer.start(make_checkpoint(3, at::zeros({2}), at::zeros({2})));
  EXPECT_TRUE(writer.wait()->committed());
}

}  // namespace
}  // namespace loom::train
