// `loom version [--json]`: Loom's version and the LibTorch it runs on.
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/core/torch_build.h"

namespace loom::cli {

std::string version_text() {
  const TorchBuild& torch = torch_build();
  const std::string cuda = torch.cuda.empty() ? "a CPU build" : "built for CUDA " + torch.cuda;
  char text[320];
  std::snprintf(text, sizeof text,
                "loom %s\nlibtorch %s (%s; oneDNN %s, OpenMP threads available %d)", LOOM_VERSION,
                torch.version.c_str(), cuda.c_str(), at::hasMKLDNN() ? "yes" : "no",
                at::get_num_threads());
  return text;
}

Command add_version_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("version", "Print the versions of Loom and LibTorch");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print them as one JSON object");
  return {sub, [json] {
            if (*json) {
              const nlohmann::ordered_json out = {{"loom", LOOM_VERSION},
                                                  {"libtorch", torch_build().version},
                                                  {"cuda", torch_build().cuda},
                                                  {"onednn", at::hasMKLDNN()},
                                                  {"threads", at::get_num_threads()}};
              std::printf("%s\n", out.dump().c_str());
              return 0;
            }
            std::printf("%s\n", version_text().c_str());
            return 0;
          }};
}

}  // namespace loom::cli
