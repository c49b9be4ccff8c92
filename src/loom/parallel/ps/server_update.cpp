#include "loom/parallel/ps/server_update.h"

namespace loom::parallel::ps {
namespace {

class AddDeltas : public ServerUpdate {
 public:
  void attach(std::vector<at::Tensor> parts, const std::vector<at::Tensor>&,
              std::int64_t steps) override {
    parts_ = std::move(parts);
    steps_ = std::max<std::int64_t>(0, steps);
  }
  void apply(const std::vector<at::Tensor>& pushed, double, double weight) override {
    for (std::size_t i = 0; i < parts_.size(); ++i) parts_[i].add_(pushed[i], weight);
    ++steps_;
  }
  int fields() const override { return 0; }
  std::vector<at::Tensor> state() const override { return {}; }
  std::int64_t steps() const override { return steps_; }

 private:
  std::vector<at::Tensor> parts_;
  std::int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<ServerUpdate> add_deltas() { return std::make_unique<AddDeltas>(); }

}  // namespace loom::parallel::ps
