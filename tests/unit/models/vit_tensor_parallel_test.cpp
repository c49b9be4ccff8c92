// The zoo's ViT split over a tensor group (parallel.tensor): its splits name exactly the
// encoder blocks' attention and MLP weights, the ranks' slices put together are the whole
// model's tensors, and three ranks as threads compute the whole model's output and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/models/model.h"
#include "loom/models/tensor_parallel.h"
#include "unit/models/thread_tensor_groups.h"

namespace loom::models {
namespace {

constexpr int kRanks = 3;  // vit_tiny's heads
const InputSpec kImages{3, 16, 16, 4};

std::unique_ptr<Model> vit(uint64_t seed) {
  at::manual_seed(seed);
  ModelConfig config;
  config.name = "vit_tiny";
  config.patch_size = 8;
  return make_model(config, kImages);
}

std::map<std::string, at::Tensor> by_name(Model& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : model.named_parameters()) out[name] = tensor;
  return out;
}

// A group that only says its size: splitting needs no sums.
class SizedGroup : public TensorGroup {
 public:
  SizedGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sum(at::Tensor&) override { FAIL() << "splitting sums nothing"; }

 private:
  int rank_, size_;
};

TEST(VitTensorParallel, SplitsNameTheBlocksMatricesAndTheirSlicesMakeTheWhole) {
  const auto whole = vit(7);
  EXPECT_FALSE(whole->tensor_plan().empty());
  const auto whole_params = by_name(*whole);
  std::vector<std::unique_ptr<Model>> ranks;
  std::vector<SizedGroup> groups;
  for (int r = 0; r < kRanks; ++r) groups.emplace_back(r, kRanks);
  TensorSplits splits;
  for (int r = 0; r < kRanks; ++r) {
    ranks.push_back(vit(7));
    const AppliedTensorPlan applied = apply_tensor_plan(*ranks.back(), groups[r]);
    EXPECT_FALSE(applied.output_split);  // the head stays whole
    if (r == 0) splits = applied.splits;
  }
  // The plan's count of what it cuts, before any split, is what the ranks' slices make.
  int64_t cut = 0;
  for (const auto& [name, split] : splits) cut += whole_params.at(name).numel();
  EXPECT_EQ(planned_split_parameter_count(*whole, kRanks), cut);
  std::set<std::string> want;
  for (int i = 0; i < 12; ++i) {
    for (const char* name :
         {"qkv.weight", "qkv.bias", "proj.weight", "fc1.weight", "fc1.bias", "fc2.weight"}) {
      want.insert("blocks." + std::to_string(i) + "." + name);
    }
  }
  std::set<std::string> got;
  for (const auto& [name, split] : splits) got.insert(name);
  EXPECT_EQ(got, want);
  const auto& qkv = splits.at("blocks.3.qkv.weight");
  EXPECT_EQ(qkv.dim, 0);
  EXPECT_EQ(qkv.sections, 3);
  EXPECT_EQ(splits.at("blocks.3.proj.weight").dim, 1);
  EXPECT_EQ(splits.at("blocks.3.fc1.bias").dim, 0);
  EXPECT_EQ(splits.at("blocks.3.fc2.weight").dim, 1);

  std::vector<std::map<std::string, at::Tensor>> held;
  for (auto& rank : ranks) held.push_back(by_name(*rank));
  for (const auto& [name, tensor] : whole_params) {
    SCOPED_TRACE(name);
    const auto split = splits.find(name);
    if (split == splits.end()) {  // whole on every rank
      for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(torch::equal(held[r].at(name), tensor));
      continue;
    }
    std::vector<at::Tensor> slices;
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(held[r].at(name).size(split->second.dim) * kRanks, tensor.size(split->second.dim));
      slices.push_back(held[r].at(name));
    }
    EXPECT_TRUE(torch::equal(whole_of(slices, split->second), tensor));
  }
  // A third of every split matrix per rank.
  EXPECT_LT(ranks[0]->parameter_count(), whole->parameter_count() * 0.35);
}

// Three ranks as threads, each holding its slices: the whole model's output on every rank, and
// each rank's gradients its slice of the whole model's (whole tensors: the whole gradient).
TEST(VitTensorParallel, ThreeRanksComputeTheWholeModelsOutputAndGradients) {
  const auto whole = vit(11);
  at::manual_seed(12);
  const at::Tensor images = torch::randn({2, 3, 16, 16});
  const at::Tensor weights = torch::randn({2, 4});  // of the logits, in the loss
  const at::Tensor want = whole->forward(images);
  (want * weights).sum().backward();
  const auto whole_params = by_name(*whole);

  std::vector<std::unique_ptr<Model>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(vit(11));
  ThreadGroups groups(kRanks);
  std::vector<at::Tensor> got(kRanks);
  std::vector<TensorSplits> splits(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      ThreadGroups::Group group(groups, r);
      splits[r] = apply_tensor_plan(*ranks[r], group).splits;
      got[r] = ranks[r]->forward(images);
      (got[r] * weights).sum().backward();
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kRanks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(torch::allclose(got[r], want, 1e-4, 1e-5));
    for (const auto& [name, tensor] : by_name(*ranks[r])) {
      SCOPED_TRACE(name);
      const at::Tensor whole_grad = whole_params.at(name).grad();
      const auto split = splits[r].find(name);
      const at::Tensor expected =
          split == splits[r].end() ? whole_grad : slice_of(whole_grad, split->second, r, kRanks);
      ASSERT_TRUE(tensor.grad().defined());
      EXPECT_TRUE(torch::allclose(tensor.grad(), expected, 1e-4, 1e-5));
    }
  }
}

TEST(VitTensorParallel, RanksThatDoNotDivideTheHeadsAreAConfigError) {
  auto model = vit(1);
  SizedGroup two(0, 2);
  try {
    apply_tensor_plan(*model, two);
    FAIL() << "2 ranks split 3 heads";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "parallel.tensor");
    EXPECT_EQ(e.field("allowed"), "1 or 3");
  }
}

}  // namespace
}  // namespace loom::models
