#include "loom/train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/train/async_checkpoint_writer.h"
#include "tools/test_support.h"

namespace loom::train {
namespace {

CheckpointData make_checkpoint(int64_t step) {
  CheckpointData d;
  d.position = {step, step / 10, step % 10, step * 32};
  d.model = {{"w", at::full({2, 3}, static_cast<float>(step))},
             {"bn.running_mean", at::zeros({3})}};
  d.optimizer = {{"w.momentum_buffer", at::ones({2, 3})}};
  d.optimizer_kind = "sgd";
  d.rng_state = at::arange(16, at::kByte);
  d.config_json = R"({"seed":1})";
  return d;
}

TEST(Checkpoint, SaveLoadAndKeepTheLastN) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", /*keep=*/2);
  EXPECT_FALSE(store.latest().has_value());
  for (int64_t step : {10, 20, 30}) store.save(make_checkpoint(step));
  auto all = store.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(std::filesystem::path(all[0]).filename(), "step-00000020");
  EXPECT_EQ(*store.latest(), all[1]);
  EXPECT_EQ(test::read_text(dir / "ckpt/latest"), "step-00000030\n");

  CheckpointData back = CheckpointStore::load(*store.latest());
  EXPECT_EQ(back.position.step, 30);
  EXPECT_EQ(back.position.epoch, 3);
  EXPECT_EQ(back.position.samples, 960);
  EXPECT_EQ(back.optimizer_kind, "sgd");
  EXPECT_TRUE(back.rng_state.equal(at::arange(16, at::kByte)));
  ASSERT_EQ(back.model.size(), 2u);
  EXPECT_TRUE(back.model[0].second.equal(at::full({2, 3}, 30.0f)));
  ASSERT_EQ(back.optimizer.size(), 1u);
  EXPECT_EQ(back.optimizer[0].first, "w.momentum_buffer");
  EXPECT_NE(test::read_text(all[1] + "/manifest.json").find("\"seed\": 1"), std::string::npos);
  EXPECT_TRUE(back.autotune_json.empty());

  // A finished autotune result comes back as written, keys in their order (not sorted).
  CheckpointData tuned = make_checkpoint(40);
  tuned.autotune_json = R"({"start":{"data.workers":1,"runtime.threads":2},"complete":true})";
  EXPECT_EQ(CheckpointStore::load(store.save(tuned)).autotune_json, tuned.autotune_json);
}

// A GPU run's generator state travels as "rng/cuda" beside the CPU's, through the background
// writer too; a CPU run's checkpoint has none.
TEST(Checkpoint, AGpuGeneratorStateComesBackWhereThereIsOne) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", /*keep=*/3);
  EXPECT_FALSE(CheckpointStore::load(store.save(make_checkpoint(10))).device_rng_state.defined());
  CheckpointData gpu = make_checkpoint(20);
  gpu.device_rng_state = at::arange(16, at::kByte).flip(0);  // seed and offset, as torch's is
  const CheckpointData back = CheckpointStore::load(store.save(gpu));
  ASSERT_TRUE(back.device_rng_state.defined());
  EXPECT_TRUE(back.device_rng_state.equal(gpu.device_rng_state));
  EXPECT_TRUE(back.rng_state.equal(at::arange(16, at::kByte)));

  AsyncCheckpointWriter writer(store);
  CheckpointData later = make_checkpoint(30);
  later.device_rng_state = gpu.device_rng_state.clone();
  writer.start(std::move(later));
  const std::optional<AsyncWriteResult> written = writer.wait();
  ASSERT_TRUE(written && written->committed()) << (written ? written->error : "none started");
  EXPECT_TRUE(CheckpointStore::load(written->path).device_rng_state.equal(gpu.device_rng_state));
}

// fp16's loss scaler travels in the manifest, through the background writer too; a run without
// loss scaling writes none.
TEST(Checkpoint, TheLossScaleComesBackWhereThereIsOne) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", /*keep=*/3);
  EXPECT_FALSE(CheckpointStore::load(store.save(make_checkpoint(10))).loss_scale.has_value());
  CheckpointData scaled = make_checkpoint(20);
  scaled.loss_scale = LossScaleState{8192.0, 17, 3};
  EXPECT_EQ(CheckpointStore::load(store.save(scaled)).loss_scale, scaled.loss_scale);

  AsyncCheckpointWriter writer(store);
  CheckpointData later = make_checkpoint(30);
  later.loss_scale = LossScaleState{4096.0, 0, 4};
  writer.start(std::move(later));
  const std::optional<AsyncWriteResult> written = writer.wait();
  ASSERT_TRUE(written && written->committed()) << (written ? written->error : "none started");
  EXPECT_EQ(CheckpointStore::load(written->path).loss_scale, (LossScaleState{4096.0, 0, 4}));
}

// A process killed halfway through a save leaves the previous checkpoint as `latest`, intact.
TEST(Checkpoint, KilledSaveLeavesThePreviousCheckpointLoadable) {
  test::TempDir dir;
  {
    CheckpointStore store(dir / "ckpt", 3);
    store.save(make_checkpoint(10));
  }
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    CheckpointStore store(dir / "ckpt", 3, /*kill_in_save_step=*/20);
    store.save(make_checkpoint(20));
    _exit(0);  // not reached: the save kills the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  CheckpointStore store(dir / "ckpt", 3);
  ASSERT_TRUE(store.latest().has_value());
  EXPECT_EQ(std::filesystem::path(*store.latest()).filename(), "step-00000010");
  EXPECT_EQ(CheckpointStore::load(*store.latest()).position.step, 10);
  EXPECT_EQ(store.list().size(), 1u);  // the half-written one is not listed

  store.save(make_checkpoint(30));  // the next save clears the debris
  for (const auto& entry : std::filesystem::directory_iterator(dir / "ckpt")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << entry.path();
  }
}

TEST(Checkpoint, FallsBackToTheNewestCompleteCheckpointWithoutPointer) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", 3);
  store.save(make_checkpoint(10));
  store.save(make_checkpoint(20));
  std::filesystem::remove(dir / "ckpt/latest");  // as if killed between rename and pointer
  EXPECT_EQ(std::filesystem::path(*store.latest()).filename(), "step-00000020");
}

TEST(Checkpoint, LoadingSomethingElseIsADataError) {
  test::TempDir dir;
  EXPECT_THROW(CheckpointStore::load(dir.path()), DataError);
  std::filesystem::create_directories(dir / "x");
  test::write_text(dir / "x/manifest.json", "{\"format\": \"other\"}");
  EXPECT_THROW(CheckpointStore::load(dir / "x"), DataError);
}

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(std::filesystem::path(p).filename().string());
  return out;
}

// checkpoint.keep_best: the best checkpoint survives pruning beside the last `keep`, its record
// says which it is, and a store opened again (a resumed run) spares it once told to.
TEST(Checkpoint, KeepsTheBestBesideTheLastN) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", /*keep=*/2);
  const std::string ten = store.save(make_checkpoint(10));
  store.set_best({ten, 10, "test_loss", 0.5});
  for (int64_t step : {20, 30, 40}) store.save(make_checkpoint(step));
  // keep = 2 alone would have left 30 and 40.
  EXPECT_EQ(names(store.list()),
            (std::vector<std::string>{"step-00000010", "step-00000030", "step-00000040"}));
  EXPECT_EQ(*store.latest(), dir / "ckpt/step-00000040");
  EXPECT_EQ(nlohmann::json::parse(test::read_text(dir / "ckpt/best.json")),
            nlohmann::json::parse(
                R"({"checkpoint":"step-00000010","step":10,"metric":"test_loss","value":0.5})"));

  // A new best frees the old one at once.
  store.set_best({dir / "ckpt/step-00000030", 30, "test_loss", 0.25});
  EXPECT_EQ(names(store.list()), (std::vector<std::string>{"step-00000030", "step-00000040"}));

  // A resumed run reads the record back and spares it; one that is not told to prunes it.
  CheckpointStore resumed(dir / "ckpt", 2);
  const auto best = resumed.recorded_best();
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->path, dir / "ckpt/step-00000030");
  EXPECT_EQ(best->step, 30);
  EXPECT_EQ(best->metric, "test_loss");
  EXPECT_DOUBLE_EQ(best->value, 0.25);
  resumed.spare(best->path);
  for (int64_t step : {50, 60}) resumed.save(make_checkpoint(step));
  EXPECT_EQ(names(resumed.list()),
            (std::vector<std::string>{"step-00000030", "step-00000050", "step-00000060"}));
  CheckpointStore forgetful(dir / "ckpt", 2);
  forgetful.save(make_checkpoint(70));
  EXPECT_EQ(names(forgetful.list()), (std::vector<std::string>{"step-00000060", "step-00000070"}));
  // The record names a checkpoint that is gone: none is kept from before.
  EXPECT_FALSE(forgetful.recorded_best().has_value());
}

TEST(Checkpoint, NoBestRecordWithoutKeepBest) {
  test::TempDir dir;
  CheckpointStore store(dir / "ckpt", 1);
  store.save(make_checkpoint(10));
  EXPECT_FALSE(store.recorded_best().has_value());
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/best.json"));
}

}  // namespace
}  // namespace loom::train
