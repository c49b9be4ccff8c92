#include "loom/parallel/model_state.h"

#include <algorithm>
#include <string>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom::parallel {
int optimizer_states(const OptimizerConfig& optimizer) {
  if (optimizer.name == "adam" || optimizer.name == "adamw") return 2;
  return optimizer.momentum > 0 ? 1 : 0;
}

double model_state_per_parameter_byte(int stage, int replicas, int states, bool accumulates) {
  const double share = stage > 0 ? 1.0 / std::max(1, replicas) : 1.0;
  const double parameters = stage >= 3 ? share : 1.0;
  double gradients = 1.0;
  if (stage == 1 || (stage >= 2 && accumulates)) gradients = 1.0 + share;
  if (stage >= 2 && !accumulates) gradients = share;
  return parameters + gradients + states * share;
}

void check_model_state_cap(const Config& config, const LayoutPlan& plan, double parameter_bytes) {
  const double cap = config.parallel.memory_cap_mb * (1 << 20);
  if (cap <= 0 || plan.pipeline) return;
  const int replicas = plan.data.replicas;
  const int states = optimizer_states(config.optimizer);
  const bool accumulates = plan.step.micro_batches > 1;
  const auto bytes_at = [&](int stage) {
    return parameter_bytes * model_state_per_parameter_byte(stage, replicas, states, accumulates);
  };
  const int stage = plan.data.zero_stage;
  if (bytes_at(stage) <= cap) return;
  std::string fix =
      replicas > 1 ? "; no ZeRO stage over " + std::to_string(replicas) + " ranks fits: add ranks"
                   : "; ZeRO shards it over data-parallel ranks: run on several";
  for (int s = stage + 1; replicas > 1 && s <= 3; ++s) {
    if (bytes_at(s) <= cap) {
      fix = "; parallel.zero: " + std::to_string(s) + " takes " + megabytes(bytes_at(s), 1);
      break;
    }
  }
  throw ConfigError("config key 'parallel.zero': the model's parameters, gradients and " +
                    config.optimizer.name + " state take " + megabytes(bytes_at(stage), 1) +
                    " a rank with parallel.zero: " + std::to_string(stage) + " over " +
                    std::to_string(replicas) + " rank(s), over parallel.memory_cap_mb (" +
                    megabytes(cap, 1) + ")" + fix);
}

}  // namespace loom::parallel
