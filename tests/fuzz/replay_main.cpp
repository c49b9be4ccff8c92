// loom_fuzz_replay TARGET PATH...: runs the fuzz target TARGET over every file of the given
// files and folders, as libFuzzer would run them, and reports how many it ran. A crash is the
// test's failure; CTest runs it over tests/fuzz/corpus/TARGET on every `make test`.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "fuzz_target.h"

namespace fs = std::filesystem;

namespace loom::fuzz {

std::map<std::string, TargetFunction>& registry() {
  static std::map<std::string, TargetFunction> targets;
  return targets;
}

bool register_target(const char* name, TargetFunction function) {
  registry()[name] = function;
  return true;
}

}  // namespace loom::fuzz

int main(int argc, char** argv) {
  const auto& targets = loom::fuzz::registry();
  if (argc < 3 || !targets.count(argv[1])) {
    std::fprintf(stderr, "usage: loom_fuzz_replay TARGET PATH...\ntargets:");
    for (const auto& [name, function] : targets) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 2; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto& entry : fs::recursive_directory_iterator(argv[i])) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.emplace_back(argv[i]);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "loom_fuzz_replay: no inputs for %s\n", argv[1]);
    return 1;
  }
  const auto target = targets.at(argv[1]);
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const std::string input = bytes.str();
    std::fprintf(stderr, "%s: %s (%zu bytes)\n", argv[1], file.filename().c_str(), input.size());
    target(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::printf("%s: %zu inputs replayed, no crash\n", argv[1], files.size());
  return 0;
}
