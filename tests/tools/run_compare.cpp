#include "tools/run_compare.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "loom/train/safetensors.h"
#include "tools/test_support.h"

namespace loom::test {

nlohmann::json summary_of(const std::string& run) {
  return nlohmann::json::parse(read_text(run + "/summary.json"));
}

std::string latest_checkpoint(const std::string& run) {
  std::string name = read_text(run + "/checkpoints/latest");
  name.erase(name.find_last_not_of(" \n") + 1);
  return run + "/checkpoints/" + name;
}

std::map<std::string, at::Tensor> model_of(const std::string& run) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : train::read_safetensors(latest_checkpoint(run) + "/model.safetensors")) {
    out[name] = t;
  }
  return out;
}

std::map<std::string, at::Tensor> optimizer_state_of(const std::string& run) {
  std::map<std::string, at::Tensor> out;
  for (auto& [name, t] : train::read_safetensors(latest_checkpoint(run) + "/state.safetensors")) {
    if (name.rfind("optimizer/", 0) == 0) out[name.substr(10)] = t;
  }
  return out;
}

void expect_same_model(const std::string& run, const std::string& reference, double tolerance) {
  const auto got = model_of(run), want = model_of(reference);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const at::Tensor& g = got.at(name);
    ASSERT_EQ(g.sizes(), w.sizes()) << name;
    if (tolerance == 0) {
      EXPECT_TRUE(g.equal(w)) << name;
      continue;
    }
    const double scale = std::max(1e-6, w.to(at::kDouble).abs().max().item<double>());
    const double error = (g.to(at::kDouble) - w.to(at::kDouble)).abs().max().item<double>();
    EXPECT_LE(error / scale, tolerance)
        << name << " differs between " << run << " and " << reference;
  }
}

void expect_identical_runs(const std::string& a, const std::string& b) {
  const std::string ca = latest_checkpoint(a), cb = latest_checkpoint(b);
  EXPECT_EQ(std::filesystem::path(ca).filename(), std::filesystem::path(cb).filename());
  for (const char* file : {"/model.safetensors", "/state.safetensors"}) {
    const std::string bytes_a = read_text(ca + file), bytes_b = read_text(cb + file);
    ASSERT_FALSE(bytes_a.empty()) << ca << file;
    EXPECT_TRUE(bytes_a == bytes_b) << file << " differs between " << a << " and " << b;
  }
}

}  // namespace loom::test
