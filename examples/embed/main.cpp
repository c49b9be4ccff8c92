// Loom as a library: configure a run in code, train, read the summary.
#include <cstdio>

#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/train/trainer.h"

// Prints one line per epoch; the trainer calls it from the training thread.
struct EpochPrinter : loom::train::TrainObserver {
  void on_epoch(const loom::train::EpochReport& r) override {
    std::printf("epoch %lld: test accuracy %.3f\n", static_cast<long long>(r.epoch + 1),
                r.test_accuracy);
  }
};

int main(int argc, char** argv) {
  try {
    // Defaults, then "key=value" overrides exactly as `loom train --set` takes them.
    std::vector<std::string> overrides(argv + 1, argv + argc);
    loom::Config config = loom::parse_config("", "embed", overrides);
    EpochPrinter printer;
    loom::train::TrainOptions options;
    options.out_dir = "embed-run";
    options.observer = &printer;
    options.topology = loom::detect_topology();
    loom::train::TrainSummary s = loom::train::train(config, options);
    std::printf("%s: %.1f samples/s, accuracy %.3f\n", s.model.c_str(), s.samples_per_second,
                s.test_accuracy);
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "embed: %s\n", e.what());
    return 1;
  }
}
