#include "loom/train/async_checkpoint_writer.h"

#include <ATen/core/grad_mode.h>

#include <chrono>
#include <exception>
#include <tuple>
#include <utility>

#include "loom/core/error.h"

namespace loom::train {

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

at::Tensor AsyncCheckpointWriter::copy_into_buffer(const std::string& key, const at::Tensor& t,
                                                   std::map<std::string, at::Tensor>& used) {
  const at::Tensor source = t.detach();
  at::Tensor buffer;
  if (auto it = buffers_.find(key); it != buffers_.end() &&
                                    it->second.scalar_type() == source.scalar_type() &&
                                    it->second.sizes() == source.sizes()) {
    buffer = it->second;
  } else {
    // Pinned where the state lives on an accelerator, so that the copy is a DMA.
    buffer = at::empty(source.sizes(), at::TensorOptions()
                                           .dtype(source.scalar_type())
                                           .device(at::kCPU)
                                           .pinned_memory(source.is_cuda()));
    ++allocations_;
  }
  buffer.copy_(source);
  used[key] = buffer;
  return buffer;
}

void AsyncCheckpointWriter::start(CheckpointData data) {
  if (thread_.joinable()) {
    throw Error("checkpoint of step " + std::to_string(data.position.step) +
                    ": the checkpoint of step " + std::to_string(result_.step) +
                    " is still being written or its outcome was not taken; wait for it first",
                {{"problem", "in_flight"},
                 {"step", std::to_string(data.position.step)},
                 {"in_flight_step", std::to_string(result_.step)}});
  }
  at::NoGradGuard no_grad;
  std::map<std::string, at::Tensor> used;
  for (auto [held, to_fetch, prefix] :
       {std::tuple{&data.model, &data.model_to_fetch, "model/"},
        std::tuple{&data.optimizer, &data.optimizer_to_fetch, "optimizer/"}}) {
    for (auto& [name, t] : *held) t = copy_into_buffer(prefix + name, t, used);
    // Written after the held ones, in this order: appended, they keep it.
    for (const TensorToFetch& t : *to_fetch) {
      held->emplace_back(t.name, copy_into_buffer(prefix + t.name, t.fetch(), used));
    }
    to_fetch->clear();
  }
  data.rng_state = copy_into_buffer("rng/cpu", data.rng_state, used);
  for (auto& [rank, rng] : data.rank_rng_states) {
    rng = copy_into_buffer("rng/cpu/rank" + std::to_string(rank), rng, used);
  }
  if (data.device_rng_state.defined()) {
    data.device_rng_state = copy_into_buffer("rng/cuda", data.device_rng_state, used);
  }
  buffers_ = std::move(used);  // those this checkpoint has no use for go

  result_ = AsyncWriteResult{};
  result_.step = data.position.step;
  running_.store(true, std::memory_order_release);
  thread_ = std::thread([this, data = std::move(data)]() mutable {
    const auto begin = std::chrono::steady_clock::now();
    try {
      result_.path = store_.save(data);
    } catch (const std::exception& e) {
      result_.error = e.what();
    } catch (...) {
      result_.error = "checkpoint of step " + std::to_string(result_.step) + " in " + store_.dir() +
                      ": unknown error";
    }
    data = CheckpointData{};  // the buffers stay the writer's; nothing else is held
    result_.background_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    running_.store(false, std::memory_order_release);
  });
}

std::optional<AsyncWriteResult> AsyncCheckpointWriter::poll() {
  if (!thread_.joinable() || running()) return std::nullopt;
  return wait();
}

std::optional<AsyncWriteResult> AsyncCheckpointWriter::wait() {
  if (!thread_.joinable()) return std::nullopt;
  thread_.join();
  return std::move(result_);
}

int64_t AsyncCheckpointWriter::buffer_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, t] : buffers_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace loom::train
