// One rank of the pipeline tests. Usage: pipeline_worker SCHEDULE CHUNKS MICROBATCHES BACKEND
// [stall]. Every rank runs its stages of a CNN (5 blocks, batch norm included) under the
// schedule for a few SGD steps and, beside it, the whole model in one process on the same
// micro-batches (the reference). Its own parameters and the step losses must agree.
//   stall: rank 1 stops answering in the second step; the others must fail within the
//          communicator's timeout, naming their stage and the rank they waited for.
// Prints "rank R: ... max relative error E" and exits 0 when the result is right.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "loom/comm/make_communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/accumulating_executor.h"
#include "loom/parallel/local_grad_sync.h"
#include "loom/parallel/pipeline/partitioner.h"
#include "loom/parallel/pipeline/pipeline_executor.h"
#include "loom/parallel/pipeline/validator.h"

using namespace loom;
namespace pp = loom::parallel::pipeline;

namespace {

constexpr int kSamplesPerMicroBatch = 3;
constexpr int kSteps = 4;
const models::InputSpec kInput{2, 12, 12, 5};

std::unique_ptr<models::Model> make_cnn() {
  ModelConfig config;
  config.name = "cnn";
  config.depth = 3;  // 7 blocks: six convolutions and the classifier
  config.width = 4;
  config.dropout = 0;
  at::manual_seed(21);
  return models::make_model(config, kInput);
}

struct Quiet : parallel::StepObserver {
  void enter(Phase) override {}
};

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).norm() / b.norm().clamp_min(1e-12)).item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string schedule_name = argv[1], backend = argv[4];
  const int chunks = std::atoi(argv[2]), microbatches = std::atoi(argv[3]);
  const bool stall = argc > 5 && std::string(argv[5]) == "stall";
  int rank = -1;
  try {
    at::set_num_threads(1);
    auto rendezvous =
        comm::Rendezvous::connect(comm::world_from_environment(), std::chrono::seconds(30));
    rank = rendezvous->rank();
    const int world = rendezvous->world();
    comm::CommOptions comm_options;
    if (stall) comm_options.timeout = std::chrono::seconds(3);
    auto communicator = comm::make_communicator(backend, rendezvous, comm_options);

    pp::Schedule schedule = pp::make_schedule(schedule_name, world, chunks, microbatches);
    pp::validate(schedule);
    auto model = make_cnn();
    auto reference = make_cnn();  // the same initial values (same seed)
    // The blocks split as evenly as their count allows.
    const std::vector<models::Block> blocks = model->blocks();
    const auto stages = pp::stage_blocks(
        blocks, pp::uniform_split(static_cast<int>(blocks.size()), schedule.stages));
    models::NamedTensors mine;  // this rank's parameters
    for (int s = 0; s < schedule.stages; ++s) {
      if (schedule.stage_rank[static_cast<size_t>(s)] != rank) continue;
      for (const auto& block : stages[static_cast<size_t>(s)]) {
        mine.insert(mine.end(), block.parameters.begin(), block.parameters.end());
      }
    }
    std::vector<at::Tensor> mine_tensors;
    for (auto& [name, p] : mine) mine_tensors.push_back(p);
    std::vector<at::Tensor> all_tensors;
    for (auto& [name, p] : reference->named_parameters()) all_tensors.push_back(p);

    models::CrossEntropyLoss loss(0.1);
    Quiet quiet;
    parallel::LocalGradSync sync(mine), reference_sync(reference->named_parameters());
    pp::PipelineExecutor pipeline(schedule, stages, loss, sync, *communicator, quiet);
    parallel::AccumulatingExecutor one_process(*reference, loss, reference_sync, quiet,
                                               {microbatches});
    torch::optim::SGD optimizer(mine_tensors, torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD reference_optimizer(all_tensors, torch::optim::SGDOptions(0.1).momentum(0.9));
    double worst_loss = 0;
    for (int step = 0; step < kSteps; ++step) {
      at::manual_seed(1000 + step);
      const int batch = kSamplesPerMicroBatch * microbatches;
      const at::Tensor images = at::randn({batch, kInput.channels, kInput.height, kInput.width});
      const at::Tensor labels = at::randint(0, kInput.classes, {batch}, at::kLong);
      const auto micro = [&](int64_t k) {
        return parallel::MicroBatch{
            images.narrow(0, k * kSamplesPerMicroBatch, kSamplesPerMicroBatch),
            labels.narrow(0, k * kSamplesPerMicroBatch, kSamplesPerMicroBatch)};
      };
      if (stall && rank == 1 && step == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
      const parallel::StepOutcome got = pipeline.run(micro);
      optimizer.step();
      const parallel::StepOutcome expected = one_process.run(micro);
      reference_optimizer.step();
      worst_loss = std::max(worst_loss, std::abs(got.loss_sum_value() - expected.loss_sum_value()) /
                                            std::abs(expected.loss_sum_value()));
      if (got.samples != expected.samples) {
        std::fprintf(stderr, "rank %d: %lld samples, expected %lld\n", rank,
                     static_cast<long long>(got.samples), static_cast<long long>(expected.samples));
        return 1;
      }
    }
    const auto reference_parameters = reference->named_parameters();
    double worst = 0;
    for (const auto& [name, p] : mine) {
      for (const auto& [other_name, q] : reference_parameters) {
        if (other_name == name) worst = std::max(worst, relative_error(p, q));
      }
    }
    std::printf(
        "rank %d: %s P=%d chunks=%d M=%d on %s, %zu parameters, max relative error %.2e, "
        "loss %.2e\n",
        rank, schedule_name.c_str(), world, chunks, microbatches, backend.c_str(), mine.size(),
        worst, worst_loss);
    if (stall) {
      std::fprintf(stderr, "rank %d: the stalled rank was not noticed\n", rank);
      return 1;
    }
    return worst <= 1e-5 && worst_loss <= 1e-5 && !mine.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}
