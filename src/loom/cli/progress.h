// Shows a training run on the terminal: the runtime choices at start, then a redrawn progress
// bar (loss, samples/s, ETA) when stdout is a terminal, or plain periodic lines when it is not
// (logs, CI), and one line per epoch.
#pragma once

#include <chrono>
#include <cstdio>

#include "loom/train/trainer.h"

namespace loom::cli {

class Progress : public train::TrainObserver {
 public:
  explicit Progress(std::FILE* out);

  void on_start(const train::RunInfo& info) override;
  void on_step(const train::StepReport& report) override;
  void on_epoch(const train::EpochReport& report) override;
  void on_checkpoint(const std::string& path) override;

 private:
  void clear_bar();

  std::FILE* out_;
  bool terminal_;
  bool bar_shown_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace loom::cli
