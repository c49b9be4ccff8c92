// What a server that holds parameters does with what the workers push (param_server.h): add
// parameter deltas that the workers' own optimizers made (parallel.ps.optimizer_on: worker, as
// BytePS's asynchronous mode), or run an optimizer on the pushed gradients with state that
// stays on the server (optimizer_on: server, the classic parameter server; server_optimizer.h,
// over the run's optimizer that train/ hands it).
//
// The server's parameters are its parts of the flat layout (flat_layout.h), one tensor per part.
// Every optimizer Loom has works element by element with one set of hyperparameters, so updating
// parts gives what updating the model's tensors would.
//
// Threading: the server's thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace loom::parallel::ps {

class ServerUpdate {
 public:
  virtual ~ServerUpdate() = default;

  // The parts to update from now on (kept), with the optimizer state to start from: fields()
  // tensors per part, part by part, after `steps` optimizer steps; empty to start afresh.
  virtual void attach(std::vector<at::Tensor> parts, const std::vector<at::Tensor>& state,
                      std::int64_t steps) = 0;
  // One update from `pushed` (one tensor per part): a whole step's mean with `weight` 1, or one
  // worker's push in asynchronous mode with `weight` 1 / workers. `lr` is the step's rate.
  virtual void apply(const std::vector<at::Tensor>& pushed, double lr, double weight) = 0;
  // Optimizer state tensors per part (0: none).
  virtual int fields() const = 0;
  // The state to checkpoint: fields() tensors per part, part by part (zeros before any update).
  virtual std::vector<at::Tensor> state() const = 0;
  virtual std::int64_t steps() const = 0;
};

// optimizer_on: worker. The parameters move by the workers' deltas: p += weight * delta.
std::unique_ptr<ServerUpdate> add_deltas();

}  // namespace loom::parallel::ps
