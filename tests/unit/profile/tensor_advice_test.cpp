// The advisor on tensor parallelism (profile/tensor_advice.h): what a tensor group would save near
// the memory cap, in place of a pipeline's stages, and its own communication.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "loom/profile/advisor.h"
#include "unit/profile/advisor_runs.h"

namespace loom::profile {
namespace {

// Near the cap, a GPT that a tensor group could split: the advice names parallel.tensor with the
// smallest group that divides the heads, and what each rank would hold less: 1/T of the layers'
// matrices' state and at most 1/T of the activations.
TEST(Advisor, NearTheMemoryCapATensorGroupSaysWhatItSaves) {
  constexpr double kMiB = 1 << 20;
  RunProfile r = run_waiting(0.0);
  r.memory_cap_bytes = 1000 * kMiB;
  r.peak_tensor_bytes = 900 * kMiB;
  r.parameter_bytes = 100 * kMiB;        // and as much again of gradients
  r.optimizer_state_bytes = 200 * kMiB;  // 400 MB of model state, 500 MB of activations
  r.tensor_heads = 6;
  r.tensor_split_share = 0.8;  // 320 MB of the model state is the layers' matrices'
  auto findings = advise(r);
  const Finding* f = find(findings, "memory_tensor");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "parallel.tensor");
  EXPECT_EQ(f->severity, "moderate");
  EXPECT_DOUBLE_EQ(f->measured.at("cap_share"), 0.9);
  EXPECT_EQ(f->suggested, "2");
  EXPECT_EQ(f->measured.at("heads"), 6);
  EXPECT_DOUBLE_EQ(f->measured.at("saved_state_bytes"), 160 * kMiB);  // half of 320 MB
  EXPECT_DOUBLE_EQ(f->measured.at("activation_bytes"), 500 * kMiB);
  EXPECT_DOUBLE_EQ(f->measured.at("saved_activation_bytes"), 250 * kMiB);

  r.tensor_heads = 9;  // 2 does not divide the heads, 3 does
  findings = advise(r);
  f = find(findings, "memory_tensor");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->suggested, "3");

  // In a pipeline's stages too, a group for each.
  RunProfile piped = r;
  piped.pipeline_ranks = 2;
  findings = advise(piped);
  f = find(findings, "memory_tensor");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->measured.at("ranks_a_pipeline"), 6);

  // Not for a model no group splits, one head, or a run already split.
  for (auto change : std::vector<std::function<void(RunProfile&)>>{
           [](RunProfile& p) { p.tensor_heads = 0; }, [](RunProfile& p) { p.tensor_heads = 1; },
           [](RunProfile& p) { p.tensor_ranks = 2; }}) {
    RunProfile other = r;
    change(other);
    EXPECT_EQ(find(advise(other), "memory_tensor"), nullptr);
  }
  // Nor far from the cap, nor where what a group splits is a small part of the peak.
  RunProfile far = r;
  far.peak_tensor_bytes = 500 * kMiB;
  EXPECT_EQ(find(advise(far), "memory_tensor"), nullptr);
  RunProfile embeddings = r;
  embeddings.peak_tensor_bytes = 820 * kMiB;
  embeddings.parameter_bytes = 200 * kMiB;
  embeddings.optimizer_state_bytes = 400 * kMiB;  // 800 MB of state, 20 MB of activations
  embeddings.tensor_split_share = 0.1;            // 80 MB of it split
  EXPECT_EQ(find(advise(embeddings), "memory_tensor"), nullptr);
}

// A pipeline's bubble that more micro-batches would not shrink enough: a tensor group of as many
// ranks in place of its stages, where they divide the heads.
TEST(Advisor, PipelineBubblesSuggestATensorGroupInPlaceOfTheStages) {
  RunProfile r = run_waiting(0.0);
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.65;
  r.step_times.seconds[static_cast<size_t>(Phase::kBubble)] = 0.35;
  r.pipeline_ranks = 2;
  r.pipeline_microbatches = 4;
  r.tensor_heads = 4;
  auto findings = advise(r);
  const Finding* f = find(findings, "bubble_tensor");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "parallel.tensor");
  EXPECT_EQ(f->severity, "high");
  EXPECT_NEAR(f->max_gain, 1 / 0.65, 1e-9);
  EXPECT_EQ(f->evidence, "bubble is 35% of the step (3.5 ms of 10.0 ms)");
  EXPECT_EQ(f->suggested, "2");
  EXPECT_EQ(f->measured.at("heads"), 4);
  ASSERT_NE(find(findings, "pipeline_bubble"), nullptr);  // more micro-batches stays the first

  RunProfile fixable = r;  // the plan predicts 8% with more micro-batches
  fixable.better_microbatches = 16;
  fixable.better_bubble = 0.08;
  EXPECT_EQ(find(advise(fixable), "bubble_tensor"), nullptr);
  fixable.better_bubble = 0.15;
  EXPECT_NE(find(advise(fixable), "bubble_tensor"), nullptr);
  RunProfile odd = r;  // 3 heads do not split over 2 ranks
  odd.tensor_heads = 3;
  EXPECT_EQ(find(advise(odd), "bubble_tensor"), nullptr);
  RunProfile small = r;
  small.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.85;
  small.step_times.seconds[static_cast<size_t>(Phase::kBubble)] = 0.15;
  EXPECT_EQ(find(advise(small), "bubble_tensor"), nullptr);
  RunProfile cnn = r;
  cnn.tensor_heads = 0;
  EXPECT_EQ(find(advise(cnn), "bubble_tensor"), nullptr);
}

// Under parallel.tensor the group's all-reduces are their own phase: a large share of the step
// says to split over fewer ranks or to send larger messages.
TEST(Advisor, TensorCommunicationUnderTensorParallelism) {
  RunProfile r = run_waiting(0.0);
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.65;
  r.step_times.seconds[static_cast<size_t>(Phase::kTensorComm)] = 0.35;
  r.tensor_ranks = 2;
  r.tensor_heads = 4;
  r.memory_cap_bytes = 100;  // near the cap: no memory_tensor, the run is already split
  r.peak_tensor_bytes = 95;
  auto findings = advise(r);
  const Finding* f = find(findings, "tensor_comm");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->key, "parallel.tensor");
  EXPECT_EQ(f->severity, "high");
  EXPECT_EQ(f->evidence, "tensor_comm is 35% of the step (3.5 ms of 10.0 ms)");
  EXPECT_NEAR(f->max_gain, 1 / 0.65, 1e-9);
  EXPECT_EQ(f->suggested, "1");  // the same ranks as data-parallel replicas
  EXPECT_EQ(find(findings, "memory_tensor"), nullptr);

  r.tensor_ranks = 4;
  findings = advise(r);
  f = find(findings, "tensor_comm");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->suggested, "2");  // half the group
  r.step_times.seconds[static_cast<size_t>(Phase::kForward)] = 0.95;
  r.step_times.seconds[static_cast<size_t>(Phase::kTensorComm)] = 0.05;
  EXPECT_EQ(find(advise(r), "tensor_comm"), nullptr);
}

}  // namespace
}  // namespace loom::profile
