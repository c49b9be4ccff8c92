// The one-replica step executor against a reference: M accumulated micro-batches give the
// gradient of one batch of the same samples, phases reach the observer, and the losses come back
// unread (a step on a GPU must not wait for it on the host).
#include "loom/parallel/accumulating_executor.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/local_grad_sync.h"

namespace loom::parallel {
namespace {

std::unique_ptr<models::Model> small_mlp() {
  ModelConfig config;
  config.name = "mlp";
  config.dropout = 0;  // deterministic forward
  at::manual_seed(11);
  return models::make_model(config, {1, 6, 6, 4});
}

struct RecordingObserver : StepObserver {
  void enter(Phase phase) override { phases.push_back(phase); }
  void forward_begins() override { ++forwards; }
  std::vector<Phase> phases;
  int forwards = 0;
};

std::vector<at::Tensor> gradients(models::Model& model) {
  std::vector<at::Tensor> out;
  for (auto& [name, p] : model.named_parameters()) out.push_back(p.grad().clone());
  return out;
}

TEST(AccumulatingExecutor, MicroBatchesGiveTheGradientOfTheWholeBatch) {
  at::manual_seed(5);
  const at::Tensor images = at::randn({12, 1, 6, 6});
  const at::Tensor labels = at::randint(0, 4, {12}, at::kLong);
  models::CrossEntropyLoss loss;

  auto reference = small_mlp();
  LocalGradSync reference_sync(reference->named_parameters());
  RecordingObserver reference_observer;
  AccumulatingExecutor whole(*reference, loss, reference_sync, reference_observer, {1});
  const StepOutcome one = whole.run([&](int64_t) { return MicroBatch{images, labels}; });

  auto model = small_mlp();
  LocalGradSync sync(model->named_parameters());
  RecordingObserver observer;
  AccumulatingExecutor accumulating(*model, loss, sync, observer, {3});
  // Run twice: the second step must start from cleared gradients, not add to the first.
  for (int step = 0; step < 2; ++step) {
    const StepOutcome three = accumulating.run([&](int64_t k) {
      return MicroBatch{images.narrow(0, 4 * k, 4), labels.narrow(0, 4 * k, 4)};
    });
    EXPECT_EQ(three.samples, 12);
    // The mean of the micro-batches' mean losses is the whole batch's mean loss.
    EXPECT_NEAR(three.loss_sum_value() / 3, one.loss_sum_value(), 1e-5);
  }
  EXPECT_EQ(one.samples, 12);
  const auto expected = gradients(*reference), got = gradients(*model);
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], expected[i], 1e-5, 1e-6)) << "parameter " << i;
  }
  EXPECT_EQ(observer.forwards, 6);
  EXPECT_NE(std::find(observer.phases.begin(), observer.phases.end(), Phase::kBackward),
            observer.phases.end());
}

// fp16's loss scale: backward starts from the loss times the scale, so the gradients are the
// unscaled run's times it exactly (a power of two), and the loss reported is the loss.
TEST(AccumulatingExecutor, ALossScaleScalesTheGradientsAndNotTheLoss) {
  at::manual_seed(6);
  const at::Tensor images = at::randn({8, 1, 6, 6});
  const at::Tensor labels = at::randint(0, 4, {8}, at::kLong);
  models::CrossEntropyLoss loss;
  const auto step = [&](models::Model& model, double scale) {
    LocalGradSync sync(model.named_parameters());
    RecordingObserver observer;
    AccumulatingExecutor executor(model, loss, sync, observer, {2});
    executor.set_loss_scale(scale);
    return executor.run([&](int64_t k) {
      return MicroBatch{images.narrow(0, 4 * k, 4), labels.narrow(0, 4 * k, 4)};
    });
  };
  auto plain = small_mlp(), scaled = small_mlp();
  const StepOutcome unscaled = step(*plain, 1.0);
  const StepOutcome outcome = step(*scaled, 1024.0);
  EXPECT_EQ(outcome.loss_sum_value(), unscaled.loss_sum_value());
  const auto expected = gradients(*plain), got = gradients(*scaled);
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].equal(expected[i] * 1024.0)) << "parameter " << i;
  }
}

TEST(AccumulatingExecutor, EmptyMicroBatchIsSkippedButCounted) {
  auto model = small_mlp();
  LocalGradSync sync(model->named_parameters());
  RecordingObserver observer;
  models::CrossEntropyLoss loss;
  AccumulatingExecutor executor(*model, loss, sync, observer, {2});
  int asked = 0;
  const StepOutcome outcome = executor.run([&](int64_t k) {
    ++asked;
    if (k == 0) return MicroBatch{at::Tensor(), at::empty({0}, at::kLong)};
    return MicroBatch{at::randn({3, 1, 6, 6}), at::tensor({0, 1, 2}, at::kLong)};
  });
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(outcome.samples, 3);
  EXPECT_EQ(observer.forwards, 1);
}

// On the meta device, where reading a tensor on the host throws, a step of two micro-batches
// runs through: nothing in it reads a loss (or anything else) on the host. Its loss sum stays a
// tensor where the losses were computed.
TEST(AccumulatingExecutor, AStepReadsNothingOnTheHost) {
  // A linear model made on the meta device (a CPU model cannot be moved there in place).
  class MetaLinear : public models::Model {
   public:
    at::Tensor forward(const at::Tensor& input) override { return input.flatten(1).matmul(w_); }
    models::NamedTensors named_parameters() override { return {{"w", w_}}; }
    models::NamedTensors named_buffers() override { return {}; }
    void train(bool) override {}
    bool is_convolutional() const override { return false; }
    std::string name() const override { return "meta_linear"; }
    std::vector<models::Block> blocks() override { return {}; }

   private:
    at::Tensor w_ = at::empty({36, 4}, at::TensorOptions().device(c10::kMeta)).requires_grad_();
  };
  auto model = std::make_unique<MetaLinear>();
  LocalGradSync sync(model->named_parameters());
  RecordingObserver observer;
  models::CrossEntropyLoss loss;
  AccumulatingExecutor executor(*model, loss, sync, observer, {2});
  const at::TensorOptions meta = at::TensorOptions().device(c10::kMeta);
  const StepOutcome outcome = executor.run([&](int64_t) {
    return MicroBatch{at::empty({3, 1, 6, 6}, meta), at::empty({3}, meta.dtype(at::kLong))};
  });
  EXPECT_EQ(outcome.samples, 6);
  ASSERT_TRUE(outcome.loss_sum.defined());
  EXPECT_TRUE(outcome.loss_sum.is_meta());
  EXPECT_EQ(outcome.loss_sum.scalar_type(), at::kDouble);
  for (auto& [name, p] : model->named_parameters()) {
    EXPECT_TRUE(p.grad().defined()) << name;
  }
}

TEST(AccumulatingExecutor, NeedsAtLeastOneMicroBatch) {
  auto model = small_mlp();
  LocalGradSync sync(model->named_parameters());
  RecordingObserver observer;
  models::CrossEntropyLoss loss;
  EXPECT_THROW(AccumulatingExecutor(*model, loss, sync, observer, {0}), Error);
}

}  // namespace
}  // namespace loom::parallel
