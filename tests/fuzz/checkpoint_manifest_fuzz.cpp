// A checkpoint's manifest.json, which --resume trusts to say where training stands. The input is
// written as the manifest of a checkpoint whose tensors are valid; loading must succeed or throw
// a DataError naming the file, never anything else.
#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fuzz_target.h"
#include "loom/core/error.h"
#include "loom/train/checkpoint.h"
#include "loom/train/safetensors.h"

namespace {

// A checkpoint folder of this process, with valid tensors, made once.
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const auto base = std::filesystem::temp_directory_path() /
                      ("loom-fuzz-checkpoint-" + std::to_string(::getpid()));
    std::filesystem::create_directories(base);
    loom::train::write_safetensors((base / "model.safetensors").string(),
                                   {{"fc.weight", at::ones({2, 3})}, {"fc.bias", at::zeros({2})}});
    loom::train::write_safetensors((base / "state.safetensors").string(),
                                   {{"rng/cpu", at::zeros({16}, at::kByte)},
                                    {"optimizer/fc.weight.momentum", at::ones({2, 3})}});
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                      ("loom-fuzz-checkpoint-" + std::to_string(::getpid())),
                                  ignored);
    });
    return base.string();
  }();
  return dir;
}

}  // namespace

LOOM_FUZZ_TARGET(checkpoint_manifest) {
  const std::string& dir = checkpoint_dir();
  {
    std::ofstream out(dir + "/manifest.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto checkpoint = loom::train::CheckpointStore::load(dir);
    if (checkpoint.model.size() != 2) loom::fuzz::broken("a loaded checkpoint lost tensors");
  } catch (const loom::DataError&) {
  }
}
