#include "loom/train/optimizer_on_servers.h"

#include "loom/train/optimizer.h"

namespace loom::train {

parallel::ps::RunOptimizer run_optimizer(const OptimizerConfig& config) {
  parallel::ps::RunOptimizer optimizer;
  optimizer.config = config;
  optimizer.make = [config](const models::NamedTensors& parameters) {
    return make_optimizer(config, parameters);
  };
  optimizer.set_learning_rate = set_learning_rate;
  optimizer.export_state = [kind = config.name](torch::optim::Optimizer& o,
                                                const models::NamedTensors& parameters) {
    return export_optimizer_state(o, kind, parameters);
  };
  optimizer.import_state = [kind = config.name](torch::optim::Optimizer& o,
                                                const models::NamedTensors& parameters,
                                                const models::NamedTensors& state) {
    import_optimizer_state(o, kind, parameters, state);
  };
  optimizer.state_name = optimizer_state_name;
  return optimizer;
}

std::optional<parallel::HeldOptimizerState> flat_optimizer_state(
    const OptimizerConfig& config, const models::NamedTensors& parameters,
    const models::NamedTensors& state) {
  return parallel::ps::flat_optimizer_state(run_optimizer(config), parameters, state);
}

models::NamedTensors named_optimizer_state(const OptimizerConfig& config,
                                           const models::NamedTensors& parameters,
                                           const parallel::HeldOptimizerState& held) {
  return parallel::ps::named_optimizer_state(run_optimizer(config), parameters, held);
}

}  // namespace loom::train
