#include "loom/cli/progress.h"

#include <unistd.h>

#include <cmath>
#include <string>

namespace loom::cli {

std::string format_duration(double seconds) {
  long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lds", s);
  }
  return buf;
}

Progress::Progress(std::FILE* out) : out_(out), terminal_(::isatty(::fileno(out)) == 1) {}

void Progress::on_start(const train::RunInfo& info) {
  const auto& r = info.runtime;
  std::fprintf(out_, "loom train: %s, %lld parameters, %lld train / %lld test samples\n",
               info.model.c_str(), static_cast<long long>(info.parameters),
               static_cast<long long>(info.train_samples),
               static_cast<long long>(info.test_samples));
  std::fprintf(out_, "  machine        %s\n", info.machine.c_str());
  std::fprintf(out_, "  device         %s (%s)\n", r.device.c_str(), r.device_reason.c_str());
  std::fprintf(out_, "  precision      %s (%s)\n", r.precision.c_str(), r.precision_reason.c_str());
  std::fprintf(out_, "  memory_format  %s (%s)\n", r.memory_format.c_str(),
               r.memory_format_reason.c_str());
  std::fprintf(out_, "  threads        %d (%s)\n", r.threads, r.threads_reason.c_str());
  std::fprintf(out_, "  layout         %s\n", info.layout.c_str());
  const long long planned = info.epochs * info.steps_per_epoch;
  std::fprintf(out_, "  plan           %lld steps: %lld epochs x %lld steps%s\n",
               static_cast<long long>(info.total_steps), static_cast<long long>(info.epochs),
               static_cast<long long>(info.steps_per_epoch),
               info.total_steps < planned ? ", capped by train.max_steps" : "");
  if (info.resumed_from_step >= 0) {
    std::fprintf(out_, "  resumed        from step %lld\n",
                 static_cast<long long>(info.resumed_from_step));
  }
  std::fprintf(out_, "  output         %s\n", info.out_dir.c_str());
  if (!info.pipeline_plan.empty()) std::fputs(info.pipeline_plan.c_str(), out_);
  std::fflush(out_);
}

void Progress::on_step(const train::StepReport& r) {
  if (!terminal_) {
    if (r.log_line) {
      const bool tokens = r.tokens_per_second > 0;
      std::fprintf(out_, "step %lld/%lld  epoch %lld/%lld  loss %.4f  lr %.4g  %.0f %s/s  ETA %s\n",
                   static_cast<long long>(r.step), static_cast<long long>(r.total_steps),
                   static_cast<long long>(r.epoch + 1), static_cast<long long>(r.epochs), r.loss,
                   r.learning_rate, tokens ? r.tokens_per_second : r.samples_per_second,
                   tokens ? "tokens" : "samples", format_duration(r.eta_seconds).c_str());
      std::fflush(out_);
    }
    return;
  }
  // Redraw at most ten times a second: the terminal is slower than a small model's steps.
  auto now = std::chrono::steady_clock::now();
  if (r.step != r.total_steps && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 24;
  const double done = r.total_steps > 0 ? double(r.step) / double(r.total_steps) : 1.0;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  const bool tokens = r.tokens_per_second > 0;
  std::fprintf(out_, "\r\033[K[%s] %3.0f%% step %lld/%lld  loss %.4f  %.0f %s/s  ETA %s",
               bar.c_str(), 100 * done, static_cast<long long>(r.step),
               static_cast<long long>(r.total_steps), r.loss,
               tokens ? r.tokens_per_second : r.samples_per_second, tokens ? "tokens" : "samples",
               format_duration(r.eta_seconds).c_str());
  std::fflush(out_);
  bar_shown_ = true;
}

void Progress::clear_bar() {
  if (terminal_ && bar_shown_) std::fprintf(out_, "\r\033[K");
  bar_shown_ = false;
}

void Progress::on_epoch(const train::EpochReport& r) {
  clear_bar();
  std::fprintf(out_, "epoch %lld/%lld  step %lld  train loss %.4f",
               static_cast<long long>(r.epoch + 1), static_cast<long long>(r.epochs),
               static_cast<long long>(r.step), r.train_loss);
  if (r.first_step > 0) {
    std::fprintf(out_, " (the %lld steps since the resume)",
                 static_cast<long long>(r.train_loss_steps));
  }
  if (r.evaluated && r.test_perplexity > 0) {
    std::fprintf(out_, "  val loss %.4f  perplexity %.2f  next-token accuracy %.2f%%", r.test_loss,
                 r.test_perplexity, 100 * r.test_accuracy);
  } else if (r.evaluated) {
    std::fprintf(out_, "  test loss %.4f  test accuracy %.2f%%", r.test_loss,
                 100 * r.test_accuracy);
  }
  std::fprintf(out_, "  (%s)\n", format_duration(r.seconds).c_str());
  std::fflush(out_);
}

void Progress::on_checkpoint(const std::string& path) {
  if (terminal_) return;  // the bar already shows progress; a line per save would scroll it away
  std::fprintf(out_, "checkpoint %s\n", path.c_str());
  std::fflush(out_);
}

}  // namespace loom::cli
