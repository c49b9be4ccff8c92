#include "loom/data/loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "loom/core/error.h"
#include "loom/data/image_folder.h"
#include "loom/data/in_memory_dataset.h"
#include "loom/data/synthetic_images.h"
#include "loom/data/transform_registry.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

LoaderOptions small_options(int threads) {
  LoaderOptions o;
  o.batch_size = 8;
  o.threads = threads;
  o.prefetch_batches = 3;
  o.seed = 9;
  o.transforms = std::make_shared<TransformPipeline>(default_train_transforms(32), 3, 0, 0, "t");
  o.max_pixels = 100'000'000;
  return o;
}

std::shared_ptr<ImageFolder> make_folder(const test::TempDir& dir, int64_t count) {
  SyntheticFolderSpec spec;
  spec.count = count;
  spec.classes = 3;
  spec.width = 96;
  spec.height = 80;
  write_synthetic_image_folder(dir / "images", spec);
  return std::make_shared<ImageFolder>(dir / "images");
}

TEST(ImageFolder, ClassesAreSortedSubfoldersAndOtherFilesAreIgnored) {
  test::TempDir dir;
  auto folder = make_folder(dir, 12);
  test::write_text(dir / "images/class_001/notes.txt", "not an image");
  ImageFolder again(dir / "images");
  EXPECT_EQ(again.size(), 12);
  EXPECT_EQ(again.class_names(), (std::vector<std::string>{"class_000", "class_001", "class_002"}));
  EXPECT_EQ(again.read(0).label, 0);
  EXPECT_EQ(again.read(11).label, 2);
  EXPECT_NE(again.read(4).key.find("class_001/img_000001.jpg"), std::string::npos);
  EXPECT_THROW(ImageFolder(dir / "absent"), DataError);
}

// Batches are a pure function of (epoch, step): any thread count, any request order.
TEST(Loader, OutputIsIdenticalForAnyThreadCountAndOrder) {
  test::TempDir dir;
  auto folder = make_folder(dir, 40);
  EpochOrder order(40, 9);
  Loader one(folder, order, small_options(1));
  Loader three(folder, order, small_options(3));
  ASSERT_EQ(one.steps_per_epoch(), 5);
  for (int64_t epoch : {0, 1}) {
    for (int64_t step = 0; step < 5; ++step) {
      Batch a = one.batch(epoch, step), b = three.batch(epoch, step);
      ASSERT_EQ(a.inputs.sizes(), (at::IntArrayRef{8, 32, 32, 3}));
      EXPECT_TRUE(a.inputs.equal(b.inputs)) << "epoch " << epoch << " step " << step;
      EXPECT_TRUE(a.targets.equal(b.targets));
      for (int64_t i = 0; i < 8; ++i) {
        EXPECT_EQ(a.targets[i].item<int64_t>(),
                  folder->read(order.index_at(epoch, step * 8 + i)).label);
      }
    }
  }
  // A jump (as after resume) gives the same batch as getting there in order.
  EXPECT_TRUE(three.batch(1, 3).inputs.equal(one.build_batch(1, 3).inputs));
  EXPECT_TRUE(three.batch(0, 2).inputs.equal(one.build_batch(0, 2).inputs));
  // Augmentation differs between epochs.
  EXPECT_FALSE(one.build_batch(0, 0).inputs.equal(one.build_batch(1, 0).inputs));
}

TEST(Loader, EvaluationCropsAreDeterministicAndKeepTheLastBatch) {
  test::TempDir dir;
  auto folder = make_folder(dir, 20);
  LoaderOptions o = small_options(2);
  o.transforms = std::make_shared<TransformPipeline>(default_eval_transforms(32), 3, 0, 0, "t");
  o.drop_last = false;
  Loader loader(folder, EpochOrder(20, 0, false), o);
  EXPECT_EQ(loader.steps_per_epoch(), 3);
  EXPECT_EQ(loader.batch(0, 2).targets.size(0), 4);
  EXPECT_TRUE(loader.batch(0, 0).inputs.equal(loader.batch(5, 0).inputs));
  EXPECT_THROW(loader.batch(0, 3), Error);  // past the epoch: at once, not after a timeout
}

// 60 good images and five corrupt files, one of each kind, all in class 0.
std::shared_ptr<ImageFolder> make_folder_with_corrupt_files(const test::TempDir& dir) {
  auto clean = make_folder(dir, 60);
  const std::string good = clean->read(0).bytes;
  test::write_corrupt_images(dir / "images/class_000", good);
  return std::make_shared<ImageFolder>(dir / "images");
}

// A folder with corrupt files of every kind trains through: each is counted, none crashes.
TEST(Loader, CorruptFilesAreCountedByReasonAndSkipped) {
  test::TempDir dir;
  auto folder = make_folder_with_corrupt_files(dir);
  ASSERT_EQ(folder->size(), 65);
  LoaderOptions o = small_options(2);
  o.batch_size = 13;
  o.max_bad_fraction = 0.5;
  Loader loader(folder, EpochOrder(65, 1), o);
  int64_t images = 0;
  for (int64_t step = 0; step < loader.steps_per_epoch(); ++step)
    images += loader.batch(0, step).targets.size(0);
  LoaderStats s = loader.stats();
  EXPECT_EQ(s.samples, 65);
  EXPECT_EQ(s.bad[static_cast<int>(SampleFault::kTruncated)], 2);    // empty, truncated
  EXPECT_EQ(s.bad[static_cast<int>(SampleFault::kUndecodable)], 2);  // wrong magic, damaged scan
  EXPECT_EQ(s.bad[static_cast<int>(SampleFault::kTooLarge)], 1);     // the 30000x30000 header
  EXPECT_EQ(images, 60);
}

TEST(Loader, FailPolicyAndBadFractionStopTheRunWithTheReason) {
  test::TempDir dir;
  auto clean = make_folder(dir, 30);
  test::write_text(dir / "images/class_000/zero.jpg", "");
  auto folder = std::make_shared<ImageFolder>(dir / "images");
  LoaderOptions o = small_options(2);
  o.batch_size = 31;
  o.policy = BadSamplePolicy::kFail;
  Loader failing(folder, EpochOrder(31, 0, false), o);
  try {
    failing.batch(0, 0);
    FAIL();
  } catch (const SampleError& e) {
    EXPECT_EQ(e.fault(), SampleFault::kTruncated);
    EXPECT_NE(std::string(e.what()).find("zero.jpg"), std::string::npos);
  }
}

TEST(Loader, TooManyBadSamplesFailTheRunWithTheCountsByReason) {
  test::TempDir dir;
  auto clean = make_folder(dir, 200);
  for (int i = 0; i < 20; ++i) {
    test::write_text(dir / ("images/class_001/zero_" + std::to_string(i) + ".jpg"), "");
  }
  auto folder = std::make_shared<ImageFolder>(dir / "images");
  LoaderOptions o = small_options(2);
  o.batch_size = 110;
  o.max_bad_fraction = 0.05;  // 20 of 220 is 9%
  Loader loader(folder, EpochOrder(220, 3), o);
  try {
    loader.batch(0, 0);
    loader.batch(0, 1);
    FAIL() << "expected the bad fraction to stop the run";
  } catch (const DataError& e) {
    EXPECT_EQ(e.field("problem"), "too_many_bad") << e.what();
    EXPECT_EQ(e.field("key"), "data.max_bad_fraction");
    EXPECT_EQ(e.field("samples"), "220");
    EXPECT_EQ(e.field("value"), "20");
    EXPECT_EQ(e.field("unreadable"), "0");
    EXPECT_EQ(e.field("truncated"), "20");
  }
}

// Substitutes keep every batch full and are the same for any thread count.
TEST(Loader, SubstitutePolicyKeepsBatchesFullAndDeterministic) {
  test::TempDir dir;
  auto folder = make_folder_with_corrupt_files(dir);
  std::set<int64_t> bad;
  for (int64_t i = 0; i < folder->size(); ++i) {
    if (folder->path(i).find("bad_") != std::string::npos) bad.insert(i);
  }
  ASSERT_EQ(bad.size(), 5u);
  LoaderOptions o = small_options(1);
  o.batch_size = 13;
  o.policy = BadSamplePolicy::kSubstitute;
  o.max_bad_fraction = 0.5;
  Loader one(folder, EpochOrder(65, 4), o);
  o.threads = 3;
  Loader three(folder, EpochOrder(65, 4), o);
  for (int64_t step = 0; step < 5; ++step) {
    Batch a = one.batch(0, step), b = three.batch(0, step);
    ASSERT_EQ(a.inputs.size(0), 13);
    EXPECT_TRUE(a.indices.equal(b.indices));
    EXPECT_TRUE(a.inputs.equal(b.inputs));
    for (int64_t i = 0; i < 13; ++i) {
      const int64_t index = a.indices[i].item<int64_t>();
      EXPECT_EQ(bad.count(index), 0u) << "a bad sample reached a batch";
      EXPECT_EQ(a.targets[i].item<int64_t>(), folder->read(index).label);
    }
  }
  EXPECT_EQ(one.stats().substituted, 5);
  EXPECT_EQ(one.stats().bad_total(), 5);
}

// Resuming at (epoch, step) with any thread count continues the uninterrupted sequence.
TEST(Loader, ResumeContinuesTheExactIndexSequence) {
  test::TempDir dir;
  auto folder = make_folder(dir, 40);
  std::vector<int64_t> uninterrupted, resumed;
  {
    Loader loader(folder, EpochOrder(40, 9), small_options(1));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      for (int64_t step = 0; step < 5; ++step) {
        at::Tensor idx = loader.batch(epoch, step).indices;
        uninterrupted.insert(uninterrupted.end(), idx.data_ptr<int64_t>(),
                             idx.data_ptr<int64_t>() + idx.numel());
      }
    }
  }
  LoaderState saved;
  {
    Loader first(folder, EpochOrder(40, 9), small_options(2));
    for (int64_t step = 0; step < 5; ++step) first.batch(0, step);
    first.batch(1, 0);
    first.batch(1, 1);
    saved = first.identity();
    saved.epoch = 1;
    saved.step = 2;  // stopped after two batches of the second epoch
  }
  Loader second(folder, EpochOrder(40, 9), small_options(3));
  check_same_sequence(saved, second.identity(), "test");
  second.seek(saved.epoch, saved.step);
  for (int64_t epoch = 1; epoch < 3; ++epoch) {
    for (int64_t step = epoch == 1 ? 2 : 0; step < 5; ++step) {
      at::Tensor idx = second.batch(epoch, step).indices;
      resumed.insert(resumed.end(), idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
    }
  }
  const std::vector<int64_t> expected(uninterrupted.begin() + 7 * 8, uninterrupted.end());
  EXPECT_EQ(resumed, expected);

  // A different data set, seed or shard is refused with what changed.
  LoaderState other = saved;
  other.samples = 41;
  EXPECT_THROW(check_same_sequence(other, second.identity(), "ckpt"), DataError);
  other = saved;
  other.seed = 10;
  EXPECT_THROW(check_same_sequence(other, second.identity(), "ckpt"), DataError);
}

// With the same global batch, the ranks' batches of every step hold the same samples whatever
// the number of ranks, so a job may go on with fewer (loom launch --nnodes MIN:MAX) and train
// on the same samples at every step; resuming checks that, not the number of ranks.
TEST(Loader, EveryStepHasTheSameSamplesOnAnyNumberOfRanks) {
  test::TempDir dir;
  auto folder = make_folder(dir, 40);
  constexpr int64_t kGlobalBatch = 8;
  std::map<int, LoaderState> identity;  // of rank 0, by world
  auto samples_of_steps = [&](int world) {
    std::vector<std::set<int64_t>> steps;
    for (int rank = 0; rank < world; ++rank) {
      LoaderOptions options = small_options(1);
      options.batch_size = kGlobalBatch / world;
      Loader loader(folder, EpochOrder(40, 9).shard(rank, world, EpochOrder::ShardMode::kDrop),
                    options);
      if (rank == 0) identity[world] = loader.identity();
      steps.resize(static_cast<size_t>(2 * loader.steps_per_epoch()));
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        for (int64_t step = 0; step < loader.steps_per_epoch(); ++step) {
          const at::Tensor idx = loader.batch(epoch, step).indices;
          steps[static_cast<size_t>(epoch * loader.steps_per_epoch() + step)].insert(
              idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
        }
      }
    }
    return steps;
  };
  const auto alone = samples_of_steps(1);
  ASSERT_EQ(alone.size(), 10u);
  EXPECT_EQ(samples_of_steps(2), alone);
  EXPECT_EQ(samples_of_steps(4), alone);
  for (const auto& step : alone) EXPECT_EQ(step.size(), static_cast<size_t>(kGlobalBatch));

  check_same_sequence(identity[4], identity[1], "ckpt");  // 4 ranks x 2 -> 1 rank x 8
  LoaderState bigger = identity[2];
  bigger.batch = 8;  // 2 x 8: another global batch
  try {
    check_same_sequence(bigger, identity[1], "ckpt");
    FAIL() << "a global batch of 16 continued one of 8";
  } catch (const DataError& e) {
    EXPECT_EQ(e.field("problem"), "global_batch") << e.what();
    EXPECT_EQ(e.field("path"), "ckpt");
    EXPECT_EQ(e.field("value"), "16");    // 2 x 8 when it was written
    EXPECT_EQ(e.field("expected"), "8");  // 1 x 8 now
  }
}

TEST(Loader, PrefetchIsCappedByBytes) {
  test::TempDir dir;
  auto folder = make_folder(dir, 40);
  LoaderOptions o = small_options(2);
  o.prefetch_batches = 4;
  Loader roomy(folder, EpochOrder(40, 9), o);
  EXPECT_EQ(roomy.batch_bytes(), 8 * 32 * 32 * 3);
  EXPECT_EQ(roomy.prefetch_depth(), 4);
  o.prefetch_bytes = 2 * 8 * 32 * 32 * 3 + 100;
  Loader tight(folder, EpochOrder(40, 9), o);
  EXPECT_EQ(tight.prefetch_depth(), 2);
  o.prefetch_bytes = 1;
  Loader tiny(folder, EpochOrder(40, 9), o);
  EXPECT_EQ(tiny.prefetch_depth(), 1);  // always at least one batch
  EXPECT_TRUE(tiny.batch(0, 1).inputs.equal(roomy.batch(0, 1).inputs));
}

// The loader's threads go on into the next epoch while the consumer finishes one, so that an
// epoch boundary costs no wait; a jump elsewhere drops what they prepared, and nothing is
// prepared past the epoch limit.
TEST(Loader, PrefetchRunsOnIntoTheNextEpoch) {
  test::TempDir dir;
  auto folder = make_folder(dir, 40);                          // 5 batches of 8 an epoch
  Loader loader(folder, EpochOrder(40, 9), small_options(2));  // 3 batches ahead
  std::mutex mutex;
  std::set<std::pair<int64_t, int64_t>> built;
  loader.set_batch_observer([&](int64_t epoch, int64_t step, auto, auto, const std::string&) {
    std::lock_guard<std::mutex> lock(mutex);
    built.emplace(epoch, step);
  });
  for (int64_t step = 0; step < 5; ++step) loader.batch(0, step);
  for (int i = 0; i < 500 && loader.ready_batches() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(loader.ready_batches(), 3);
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (int64_t step = 0; step < 3; ++step) EXPECT_EQ(built.count({1, step}), 1u) << step;
  }
  for (int64_t step = 0; step < 5; ++step) {
    EXPECT_TRUE(loader.batch(1, step).inputs.equal(loader.build_batch(1, step).inputs)) << step;
  }
  // set_epoch(4) or a resume: the batches of epoch 2 prepared meanwhile are not handed out.
  EXPECT_TRUE(loader.batch(4, 2).inputs.equal(loader.build_batch(4, 2).inputs));

  Loader last(folder, EpochOrder(40, 9), small_options(2));
  last.set_epoch_limit(1);
  for (int64_t step = 0; step < 5; ++step) last.batch(0, step);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(last.ready_batches(), 0);
  EXPECT_TRUE(last.batch(1, 0).inputs.equal(last.build_batch(1, 0).inputs));  // still built
}

// The autotuner changes threads and prefetch depth while batches flow: the batches stay the
// same, and after a reduction only the remaining threads build.
// Pinned batches are for a CUDA feeder; a CPU-only LibTorch cannot pin, and says so up front.
TEST(Loader, PinnedBatchesNeedACudaBuild) {
  if (at::hasCUDA()) GTEST_SKIP() << "a CUDA build can pin";
  test::TempDir dir;
  LoaderOptions options = small_options(1);
  options.pin_memory = true;
  try {
    Loader loader(make_folder(dir, 8), EpochOrder(8, 1), options);
    FAIL() << "pinned batches on a CPU-only LibTorch";
  } catch (const Error& e) {
    EXPECT_EQ(e.field("problem"), "no_cuda") << e.what();
  }
}

TEST(Loader, ThreadsAndPrefetchChangeWhileRunning) {
  test::TempDir dir;
  auto folder = make_folder(dir, 240);  // 30 batches of 8
  LoaderOptions o = small_options(1);
  o.prefetch_batches = 2;
  Loader loader(folder, EpochOrder(240, 9), o);
  std::mutex mutex;
  std::map<int64_t, std::thread::id> built_by;
  loader.set_batch_observer([&](int64_t, int64_t step, auto, auto, const std::string&) {
    std::lock_guard<std::mutex> lock(mutex);
    built_by[step] = std::this_thread::get_id();
  });
  auto expect_step = [&](int64_t step) {
    EXPECT_TRUE(loader.batch(0, step).inputs.equal(loader.build_batch(0, step).inputs))
        << "step " << step;
  };
  for (int64_t step = 0; step < 4; ++step) expect_step(step);
  loader.set_threads(3);
  loader.set_prefetch_batches(6);
  EXPECT_EQ(loader.threads(), 3);
  EXPECT_EQ(loader.prefetch_depth(), 6);
  for (int64_t step = 4; step < 10; ++step) expect_step(step);
  loader.set_threads(1);
  loader.set_prefetch_batches(1);
  for (int64_t step = 10; step < 30; ++step) expect_step(step);
  // Steps up to 10 + 6 may have been claimed before the change; all later ones by one thread.
  std::set<std::thread::id> late_builders;
  for (int64_t step = 17; step < 30; ++step) late_builders.insert(built_by.at(step));
  EXPECT_EQ(late_builders.size(), 1u);
  EXPECT_THROW(loader.set_threads(0), Error);
}

// In-memory sets (IDX, synthetic) go through the same loader, as pixels.
ImageSet numbered_set(int64_t n) {
  // Image i is filled with the value i, so a batch tells which samples it holds.
  ImageSet set;
  set.images = at::arange(n, at::kByte).view({n, 1, 1, 1}).expand({n, 4, 4, 1}).contiguous();
  set.labels = at::arange(n, at::kLong);
  set.classes = n;
  return set;
}

LoaderOptions in_memory_options(std::vector<TransformConfig> transforms, int64_t batch) {
  for (auto& t : transforms) complete_transform(t, "t");
  LoaderOptions o;
  o.batch_size = batch;
  o.threads = 1;
  o.seed = 5;
  o.transforms = std::make_shared<TransformPipeline>(transforms, 1, 4, 4, "t");
  return o;
}

TEST(InMemoryLoader, BatchesFollowTheEpochOrder) {
  auto set = std::make_shared<InMemoryDataset>(numbered_set(10));
  EpochOrder order(10, 5);
  Loader loader(set, order, in_memory_options({}, 4));
  EXPECT_EQ(loader.steps_per_epoch(), 2);
  Batch b = loader.batch(1, 1);
  ASSERT_EQ(b.inputs.sizes(), (at::IntArrayRef{4, 4, 4, 1}));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b.targets[i].item<int64_t>(), order.index_at(1, 4 + i));
    EXPECT_EQ(b.indices[i].item<int64_t>(), order.index_at(1, 4 + i));
    EXPECT_EQ(b.inputs[i][2][3][0].item<int64_t>(), b.targets[i].item<int64_t>());
  }
  EXPECT_THROW(Loader(set, EpochOrder(10, 0), in_memory_options({}, 11)), ConfigError);
}

TEST(InMemoryLoader, ShardedLoadersSplitTheEpochWithEqualSteps) {
  auto set = std::make_shared<InMemoryDataset>(numbered_set(21));
  EpochOrder order(21, 5);
  std::vector<int64_t> seen;
  for (int rank : {0, 1}) {
    Loader loader(set, order.shard(rank, 2, EpochOrder::ShardMode::kDrop),
                  in_memory_options({}, 4));
    ASSERT_EQ(loader.steps_per_epoch(), 2);  // 10 samples each, 2 full batches of 4
    EXPECT_EQ(loader.identity().rank, rank);
    for (int64_t s = 0; s < 2; ++s) {
      at::Tensor labels = loader.batch(0, s).targets;
      seen.insert(seen.end(), labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + 4);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
}

TEST(InMemoryLoader, ShiftAndFlipMovePixelsAndAreKeyedByEpoch) {
  at::manual_seed(3);
  ImageSet set;
  set.images = at::randint(1, 256, {16, 4, 4, 1}, at::kByte);
  set.labels = at::zeros({16}, at::kLong);
  set.classes = 2;
  auto data = std::make_shared<InMemoryDataset>(set);
  Loader plain(data, EpochOrder(16, 1), in_memory_options({}, 8));
  Loader shifted(
      data, EpochOrder(16, 1),
      in_memory_options(
          {{"random_crop", {{"size", {4}}, {"padding", {2}}}}, {"random_horizontal_flip", {}}}, 8));
  Batch a = shifted.batch(0, 0), p = plain.batch(0, 0);
  EXPECT_FALSE(a.inputs.equal(p.inputs));
  EXPECT_TRUE(a.inputs.equal(shifted.build_batch(0, 0).inputs));
  EXPECT_FALSE(a.inputs.equal(shifted.build_batch(1, 0).inputs));
  // Every output is the source shifted by (dy, dx) in [-2, 2], maybe mirrored, zeros outside.
  for (int64_t i = 0; i < 8; ++i) {
    const at::Tensor src = p.inputs[i].squeeze(-1), out = a.inputs[i].squeeze(-1);
    bool explained = false;
    for (const bool flip : {false, true}) {
      const at::Tensor base = flip ? src.flip({1}) : src;
      for (int dy = -2; dy <= 2 && !explained; ++dy) {
        for (int dx = -2; dx <= 2 && !explained; ++dx) {
          at::Tensor expected = at::zeros({4, 4}, at::kByte);
          for (int y = 0; y < 4; ++y) {
            for (int x = 0; x < 4; ++x) {
              const int sy = y + dy, sx = x + dx;
              if (sy >= 0 && sy < 4 && sx >= 0 && sx < 4) expected[y][x] = base[sy][sx];
            }
          }
          explained = expected.equal(out);
        }
      }
    }
    EXPECT_TRUE(explained) << "sample " << i << " is not a shift or flip of its source";
  }
}

}  // namespace
}  // namespace loom::data
