// Reading and comparing what `loom train` runs did, from their run directories: the summary,
// and the final checkpoint tensor by tensor under the model's names.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace loom::test {

// RUN/summary.json, parsed.
nlohmann::json summary_of(const std::string& run);
// RUN/checkpoints/<the name in RUN/checkpoints/latest>.
std::string latest_checkpoint(const std::string& run);
// The final checkpoint's model tensors by name.
std::map<std::string, at::Tensor> model_of(const std::string& run);
// The final checkpoint's optimizer state by name ("<parameter>.exp_avg", ...).
std::map<std::string, at::Tensor> optimizer_state_of(const std::string& run);
// Every tensor of the model, by name, within a relative error of the largest element (0: bit for
// bit). GoogleTest failures name the tensor.
void expect_same_model(const std::string& run, const std::string& reference, double tolerance);
// The same final step, and model and training state byte for byte.
void expect_identical_runs(const std::string& a, const std::string& b);

}  // namespace loom::test
