#include "loom/parallel/pipeline/pipeline_stages.h"

#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "loom/comm/tensor_message.h"
#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

// Names, types and shapes of a rank's tensors, as JSON in a byte tensor (what rank 0 lays the
// checkpoint files out from before any of the tensors themselves arrive).
at::Tensor describe_tensors(const NamedTensors& model, const NamedTensors& optimizer) {
  nlohmann::json d = {{"model", nlohmann::json::array()}, {"optimizer", nlohmann::json::array()}};
  for (const auto& [key, tensors] : {std::pair{"model", &model}, {"optimizer", &optimizer}}) {
    for (const auto& [name, t] : *tensors) {
      d[key].push_back({name, static_cast<int>(t.scalar_type()), t.sizes().vec()});
    }
  }
  const std::string text = d.dump();
  at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  return bytes;
}

}  // namespace

std::optional<CheckpointTensors> PipelineStages::gather(CheckpointTensors mine) {
  comm::Communicator& comm = pipeline_;
  if (comm.rank() != 0) {
    // A stage other than the first's sends what it holds whole: what its replicas or tensor
    // group gave it to fetch is taken in first.
    fetch_all(mine);
    // Sent from this rank's own tensors (contiguous, as parameters and optimizer state are: no
    // copies), all at once: each completes as rank 0 takes it in.
    comm::PendingSends sends;
    comm::send_tensor(comm, describe_tensors(mine.model, mine.optimizer), 0, sends);
    comm::send_tensor(comm, mine.rng, 0, sends);
    for (const auto* tensors : {&mine.model, &mine.optimizer}) {
      for (const auto& [name, t] : *tensors) {
        comm::send_tensor(comm, t.detach().contiguous(), 0, sends);
      }
    }
    sends.wait_all(comm.options().timeout);
    return std::nullopt;
  }
  CheckpointTensors all;
  all.model = std::move(mine.model);
  all.optimizer = std::move(mine.optimizer);
  // This stage's own tensors still to come (its tensor group's split ones), then the others'.
  all.model_to_fetch = std::move(mine.model_to_fetch);
  all.optimizer_to_fetch = std::move(mine.optimizer_to_fetch);
  all.rng = mine.rng;
  all.rank_rngs[0] = mine.rng;
  // A tied parameter comes from its owner and from each copy, equal: the first is written.
  std::set<std::string> model_names, optimizer_names;
  for (const auto& [name, t] : all.model) model_names.insert(name);
  for (const auto& t : all.model_to_fetch) model_names.insert(t.name);
  for (const auto& [name, t] : all.optimizer) optimizer_names.insert(name);
  for (const auto& t : all.optimizer_to_fetch) optimizer_names.insert(t.name);
  auto peers = std::make_shared<std::vector<std::unique_ptr<comm::PeerTensors>>>();
  for (int r = 1; r < comm.world(); ++r) {
    const at::Tensor bytes = comm::recv_tensor(comm, r);
    nlohmann::json d;
    try {
      d = nlohmann::json::parse(std::string(static_cast<const char*>(bytes.data_ptr()),
                                            static_cast<size_t>(bytes.numel())));
    } catch (const nlohmann::json::exception& e) {
      throw CommError("checkpoint: pipeline rank " + std::to_string(r) +
                      " described its tensors in malformed JSON: " + e.what());
    }
    all.rank_rngs[r] = comm::recv_tensor(comm, r);
    const size_t count = d["model"].size() + d["optimizer"].size();
    peers->push_back(std::make_unique<comm::PeerTensors>(comm, r, count));
    const size_t peer = peers->size() - 1;
    size_t index = 0;
    for (const auto& [key, names, out] :
         {std::tuple{"model", &model_names, &all.model_to_fetch},
          std::tuple{"optimizer", &optimizer_names, &all.optimizer_to_fetch}}) {
      for (const auto& entry : d[key]) {
        const std::string name = entry[0].get<std::string>();
        if (names->insert(name).second) {
          out->push_back({name, static_cast<at::ScalarType>(entry[1].get<int>()),
                          entry[2].get<std::vector<int64_t>>(),
                          [peers, peer, index] { return (*peers)[peer]->take(index); }});
        }
        ++index;
      }
    }
  }
  all.finish = [peers, own = std::move(mine.finish)] {
    // The other stages' sends complete even when this stage's tensor group failed to.
    try {
      if (own) own();
    } catch (...) {
      for (auto& peer : *peers) peer->drain();
      throw;
    }
    for (auto& peer : *peers) peer->drain();
  };
  return all;
}

NamedTensors PipelineStages::own_model_state(NamedTensors whole) const {
  NamedTensors own;
  for (auto& named : whole) {
    const auto dot = named.first.rfind('.');
    if (held_.count(named.first) ||
        (dot != std::string::npos && held_.count(named.first.substr(0, dot)))) {
      own.push_back(std::move(named));
    }
  }
  return own;
}

}  // namespace loom::parallel::pipeline
