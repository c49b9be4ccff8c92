// `loom version`: Loom's version and the LibTorch it runs on.
#include <ATen/Context.h>
#include <torch/version.h>

#include <cstdio>

#include "loom/cli/commands.h"

namespace loom::cli {

Command add_version_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("version", "Print the versions of Loom and LibTorch");
  return {sub, [] {
            std::printf("loom %s\nlibtorch %s (oneDNN %s, OpenMP threads available %d)\n",
                        LOOM_VERSION, TORCH_VERSION, at::hasMKLDNN() ? "yes" : "no",
                        at::get_num_threads());
            return 0;
          }};
}

}  // namespace loom::cli
