// One rank of the schedule property tests. Usage: schedule_property_worker BACKEND CASE...
// where each CASE is a schedule:
//   random:SEED:CHUNKS:MICROBATCHES:split|full  a random valid schedule (dist/random_schedule.h)
//   csv:PATH        a compute-only file in torch.distributed.pipelining's layout, validated
//   unchecked:PATH  a file taken as written, not validated: shows what the executor itself
//                   catches (a mis-routed message)
// For every case, a small GPT (tied embedding included) and a small CNN (batch norm included)
// run one step through the schedule and, beside it, in one process accumulating the same
// micro-batches. The loss and every gradient this rank holds must agree within a relative 1e-5.
// Prints "rank R: CASE MODEL ..." per case and exits 0 when every one is right.
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "dist/random_schedule.h"
#include "loom/comm/make_communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/parallel/accumulating_executor.h"
#include "loom/parallel/local_grad_sync.h"
#include "loom/parallel/pipeline/partitioner.h"
#include "loom/parallel/pipeline/pipeline_executor.h"
#include "loom/parallel/pipeline/schedule_csv.h"
#include "loom/parallel/pipeline/tied_parameters.h"
#include "loom/parallel/pipeline/validator.h"

using namespace loom;
namespace pp = loom::parallel::pipeline;

namespace {

constexpr int64_t kSamples = 2;  // per micro-batch
constexpr double kTolerance = 1e-5;

struct Quiet : parallel::StepObserver {
  void enter(Phase) override {}
};

// A model, its loss, and how to make a step's micro-batches for it.
struct Subject {
  std::string name;
  models::InputSpec input;
  ModelConfig config;
  std::unique_ptr<models::Loss> loss;

  std::unique_ptr<models::Model> make() const {
    at::manual_seed(21);  // every rank and the reference start from the same values
    return models::make_model(config, input);
  }
  std::pair<at::Tensor, at::Tensor> batch(int64_t samples) const {
    at::manual_seed(1000);
    if (input.task == models::Task::kLanguageModel) {
      return {at::randint(0, input.classes, {samples, input.seq_len}, at::kLong),
              at::randint(0, input.classes, {samples, input.seq_len}, at::kLong)};
    }
    return {at::randn({samples, input.channels, input.height, input.width}),
            at::randint(0, input.classes, {samples}, at::kLong)};
  }
};

Subject tiny_gpt() {
  Subject s;
  s.name = "gpt";
  s.config.name = "gpt";
  s.config.dropout = 0;
  s.config.gpt.n_layer = 4;  // 6 blocks: enough for 3 ranks x 2 stages
  s.config.gpt.n_head = 2;
  s.config.gpt.n_embd = 16;
  s.input.task = models::Task::kLanguageModel;
  s.input.classes = 32;  // the vocabulary
  s.input.seq_len = 8;
  s.loss = models::make_task_loss(models::Task::kLanguageModel);
  return s;
}

Subject tiny_cnn() {
  Subject s;
  s.name = "cnn";
  s.config.name = "cnn";
  s.config.depth = 3;  // 7 blocks: six convolutions with batch norm, and the classifier
  s.config.width = 4;
  s.config.dropout = 0;
  s.input = {2, 12, 12, 5};
  s.loss = models::make_task_loss(models::Task::kImageClassification, 0.1);
  return s;
}

pp::Schedule schedule_of(const std::string& spec, int world, bool& checked) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon), rest = spec.substr(colon + 1);
  checked = kind != "unchecked";
  if (kind == "csv" || kind == "unchecked") {
    std::ifstream file(rest);
    if (!file) throw Error("cannot read " + rest);
    std::stringstream text;
    text << file.rdbuf();
    return pp::schedule_from_csv(text.str(), rest);
  }
  std::vector<std::string> parts;
  std::istringstream fields(rest);
  for (std::string part; std::getline(fields, part, ':');) parts.push_back(part);
  if (kind != "random" || parts.size() != 4) throw Error("unknown case '" + spec + "'");
  test::RandomScheduleOptions options;
  options.ranks = world;
  options.chunks = std::stoi(parts[1]);
  options.microbatches = std::stoi(parts[2]);
  options.split_backward = parts[3] == "split";
  return test::random_schedule(std::stoull(parts[0]), options);
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).norm() / b.norm().clamp_min(1e-12)).item<double>();
}

// Runs one step of `schedule` on `subject` and of one process beside it; the worst relative
// error of the loss and of this rank's gradients.
double run_case(const pp::Schedule& schedule, const Subject& subject, comm::Communicator& comm) {
  const int rank = comm.rank();
  auto model = subject.make(), reference = subject.make();
  const std::vector<models::Block> blocks = model->blocks();
  const auto stages =
      pp::stage_blocks(blocks, pp::uniform_split(static_cast<int>(blocks.size()), schedule.stages));
  const pp::TiedParameters tied(stages, schedule, rank);
  models::NamedTensors mine;  // this rank's parameters, tied copies included
  for (int s = 0; s < schedule.stages; ++s) {
    if (schedule.stage_rank[static_cast<size_t>(s)] != rank) continue;
    for (const auto& block : stages[static_cast<size_t>(s)]) {
      mine.insert(mine.end(), block.parameters.begin(), block.parameters.end());
      mine.insert(mine.end(), block.tied.begin(), block.tied.end());
    }
  }
  Quiet quiet;
  parallel::LocalGradSync sync(mine), reference_sync(reference->named_parameters());
  pp::PipelineExecutor pipeline(schedule, stages, *subject.loss, sync, comm, quiet);
  parallel::AccumulatingExecutor one_process(*reference, *subject.loss, reference_sync, quiet,
                                             {schedule.microbatches});
  const auto [inputs, targets] = subject.batch(kSamples * schedule.microbatches);
  const auto micro = [&](int64_t k) {
    return parallel::MicroBatch{inputs.narrow(0, k * kSamples, kSamples),
                                targets.narrow(0, k * kSamples, kSamples)};
  };
  const parallel::StepOutcome got = pipeline.run(micro);
  tied.sum_gradients(comm);
  const parallel::StepOutcome expected = one_process.run(micro);
  if (got.samples != expected.samples) {
    throw Error(std::to_string(got.samples) + " samples, expected " +
                std::to_string(expected.samples));
  }
  double worst = std::abs(got.loss_sum_value() - expected.loss_sum_value()) /
                 std::abs(expected.loss_sum_value());
  const auto reference_parameters = reference->named_parameters();
  for (const auto& [name, p] : mine) {
    for (const auto& [other_name, q] : reference_parameters) {
      if (other_name != name) continue;
      if (!p.grad().defined() || !q.grad().defined()) throw Error(name + " has no gradient");
      worst = std::max(worst, relative_error(p.grad(), q.grad()));
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string backend = argv[1];
  int rank = -1;
  try {
    at::set_num_threads(1);
    auto rendezvous =
        comm::Rendezvous::connect(comm::world_from_environment(), std::chrono::seconds(30));
    rank = rendezvous->rank();
    comm::CommOptions comm_options;
    comm_options.timeout = std::chrono::seconds(20);
    auto communicator = comm::make_communicator(backend, rendezvous, comm_options);
    const Subject subjects[] = {tiny_gpt(), tiny_cnn()};
    int failed = 0;
    for (int i = 2; i < argc; ++i) {
      const std::string spec = argv[i];
      bool checked = true;
      const pp::Schedule schedule = schedule_of(spec, rendezvous->world(), checked);
      if (checked) pp::validate(schedule);
      for (const Subject& subject : subjects) {
        const double error = run_case(schedule, subject, *communicator);
        const bool ok = error <= kTolerance;
        failed += !ok;
        std::printf("rank %d: %s %s (%d stages, %d micro-batches): max relative error %.2e%s\n",
                    rank, spec.c_str(), subject.name.c_str(), schedule.stages,
                    schedule.microbatches, error, ok ? "" : " FAILED");
        if (!ok)
          std::printf("rank %d: its actions: %s\n", rank, schedule.describe_rank(rank).c_str());
      }
    }
    std::printf("rank %d: %d of %d cases right\n", rank, 2 * (argc - 2) - failed, 2 * (argc - 2));
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}
