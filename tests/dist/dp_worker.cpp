// One rank of the DataParallel tests. Usage: dp_worker SCENARIO BACKEND
// Every rank trains a model on its half of a global batch with DataParallel and, beside it, a
// reference copy on the whole global batch in one process; the parameters must agree.
//   equivalence   5 SGD steps, several buckets (relative error <= 1e-5)
//   accumulation  2 micro-batches per step under no_sync vs one batch of both
//   compression   bf16 buckets (relative error <= 1e-2)
//   unused        a parameter without gradient: must fail naming it
//   unused-ok     the same with find_unused_parameters: must train
//   rebucket      equivalence with smaller buckets from step 3 on (what the autotuner does)
// Prints "rank R: ... max relative error E, overlap O%" and exits 0 when the result is right.
// Every line for people is followed by one of facts for the tests (comm_scenarios.h's
// facts_line): "buckets=4 rank=0 ...", and on an error its kind and fields.
#include <torch/torch.h>

#include <cstdio>

#include "comm_scenarios.h"
#include "loom/comm/make_communicator.h"
#include "loom/comm/rendezvous.h"
#include "loom/parallel/data_parallel.h"

using namespace loom;

namespace {

constexpr int kGlobalBatch = 12;  // divisible by 2 and 3 ranks, and by 2 micro-batches
constexpr int kFeatures = 20;

struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool with_unused) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    hidden = register_module("hidden", torch::nn::Linear(4 * kFeatures, 64));
    out = register_module("out", torch::nn::Linear(64, 10));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(64, 10));
    // Frozen: no gradient, no bucket, but every rank must still start from rank 0's values.
    frozen = register_module("frozen", torch::nn::Linear(64, 64));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv->forward(x.view({-1, 1, 4, 5}))).flatten(1);
    x = torch::relu(hidden->forward(x));
    return out->forward(x + frozen->forward(x));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear hidden{nullptr}, out{nullptr}, unused{nullptr}, frozen{nullptr};
};
TORCH_MODULE(Net);

parallel::NamedTensors named(const torch::OrderedDict<std::string, at::Tensor>& dict) {
  parallel::NamedTensors list;
  for (const auto& item : dict) list.emplace_back(item.key(), item.value());
  return list;
}

// Relative error of the worst parameter.
double max_relative_error(Net& a, Net& b) {
  double worst = 0;
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& item : pa) {
    const auto& other = pb[item.key()];
    worst = std::max(
        worst, ((item.value() - other).norm() / other.norm().clamp_min(1e-12)).item<double>());
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string scenario = argv[1], backend = argv[2];
  int rank = -1;
  try {
    at::set_num_threads(1);
    auto rendezvous =
        comm::Rendezvous::connect(comm::world_from_environment(), std::chrono::seconds(30));
    rank = rendezvous->rank();
    const int world = rendezvous->world();
    auto communicator = comm::make_communicator(backend, rendezvous, comm::CommOptions{});

    const bool with_unused = scenario.rfind("unused", 0) == 0;
    torch::manual_seed(100 + rank);  // different initial values: the broadcast must fix them
    Net model(with_unused);
    torch::manual_seed(100);
    Net reference(with_unused);  // rank 0's initial values
    parallel::DataParallelOptions options;
    options.buckets.first_bytes = 1024;  // several buckets even for this small model
    options.buckets.cap_bytes = 8192;
    options.find_unused_parameters = scenario == "unused-ok";
    if (scenario == "compression") options.compression = at::kBFloat16;
    parallel::DataParallel dp(named(model->named_parameters()), named(model->named_buffers()),
                              *communicator, options);

    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD reference_optimizer(reference->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    const int micro = scenario == "accumulation" ? 2 : 1;
    const int local = kGlobalBatch / world;
    double overlap = 0;
    for (int step = 0; step < 5; ++step) {
      torch::manual_seed(1000 + step);
      const auto x = torch::randn({kGlobalBatch, kFeatures});
      const auto y = torch::randint(10, {kGlobalBatch});

      dp.zero_grad();
      for (int m = 0; m < micro; ++m) {
        // Rank r's rows of the global batch, split into `micro` micro-batches.
        const int rows = local / micro, first = rank * local + m * rows;
        std::optional<parallel::DataParallel::NoSync> accumulate;
        if (m + 1 < micro) accumulate.emplace(dp);
        dp.prepare();
        auto loss = torch::nn::functional::cross_entropy(model->forward(x.narrow(0, first, rows)),
                                                         y.narrow(0, first, rows));
        (loss / micro).backward();
        dp.finish();
      }
      optimizer.step();
      overlap = dp.last_stats().overlap();
      if (scenario == "rebucket" && step == 1) {
        const size_t buckets = dp.bucket_names().size();
        std::printf("rank %d: rebucketing %zu buckets\n%s\n", rank, buckets,
                    test::facts_line({{"rank", std::to_string(rank)},
                                      {"event", "rebucketing"},
                                      {"buckets", std::to_string(buckets)}})
                        .c_str());
        dp.set_bucket_limits({512, 2048});
      }

      reference_optimizer.zero_grad();
      torch::nn::functional::cross_entropy(reference->forward(x), y).backward();
      reference_optimizer.step();
    }
    const double error = max_relative_error(model, reference);
    const double tolerance = scenario == "compression" ? 1e-2 : 1e-5;
    std::printf("rank %d: %s on %s, %zu buckets, max relative error %.2e, overlap %.0f%%\n%s\n",
                rank, scenario.c_str(), backend.c_str(), dp.bucket_names().size(), error,
                100 * overlap,
                test::facts_line({{"rank", std::to_string(rank)},
                                  {"event", "trained"},
                                  {"scenario", scenario},
                                  {"backend", backend},
                                  {"buckets", std::to_string(dp.bucket_names().size())},
                                  {"within_tolerance", error <= tolerance ? "yes" : "no"}})
                    .c_str());
    if (scenario == "unused") {
      std::fprintf(stderr, "rank %d: the unused parameter was not reported\n", rank);
      return 1;
    }
    return error <= tolerance ? 0 : 1;
  } catch (const std::exception& e) {
    // The error's fields (which parameters, which setting) besides "rank" and "event".
    ErrorFields facts = {{"rank", std::to_string(rank)}, {"event", "error"}};
    if (const auto* error = dynamic_cast<const Error*>(&e)) {
      facts.insert(error->fields().begin(), error->fields().end());
    }
    std::fprintf(stderr, "rank %d: %s\n%s\n", rank, e.what(), test::facts_line(facts).c_str());
    return 1;
  }
}
