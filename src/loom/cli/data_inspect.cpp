// `loom data inspect [CONFIG]`: what the configured data sets hold before a run uses them —
// samples per class, image sizes, and the files that cannot be used with why; for token data,
// the tokens of each split and shard, the largest id of each, the windows they make, and the
// shards that cannot be used with why.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loom/cli/commands.h"
#include "loom/core/config.h"
#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/data/configured_loaders.h"
#include "loom/data/dataset_report.h"
#include "loom/data/token_windows.h"
#include "loom/data/tokenizer.h"
#include "loom/train/train_data.h"

namespace loom::cli {
namespace {

struct InspectArgs {
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  bool decode = false;
  bool json = false;
};

void print_report(const char* split, const std::string& path, const data::Dataset& dataset,
                  const data::DatasetReport& r) {
  std::printf("%s: %s\n", split, path.c_str());
  std::printf("  %lld samples, %zu classes, %lld bad\n", static_cast<long long>(r.samples),
              r.per_class.size(), static_cast<long long>(r.bad_total()));
  std::printf("  %-24s %10s\n", "class", "samples");
  for (size_t c = 0; c < r.per_class.size(); ++c) {
    std::printf("  %-24s %10lld\n", dataset.class_names()[c].c_str(),
                static_cast<long long>(r.per_class[c]));
  }
  std::printf("  image sizes: width %d..%d, height %d..%d; by the longer side:\n", r.min_width,
              r.max_width, r.min_height, r.max_height);
  for (size_t b = 0; b < r.by_longer_side.size(); ++b) {
    if (r.by_longer_side[b] == 0) continue;
    const std::string bucket = b < data::DatasetReport::kSideBounds.size()
                                   ? "<= " + std::to_string(data::DatasetReport::kSideBounds[b])
                                   : "> " + std::to_string(data::DatasetReport::kSideBounds.back());
    std::printf("    %-10s %10lld\n", bucket.c_str(), static_cast<long long>(r.by_longer_side[b]));
  }
  if (r.bad_total() > 0) {
    std::printf("  bad: unreadable %lld, truncated %lld, undecodable %lld, too large %lld\n",
                static_cast<long long>(r.bad[0]), static_cast<long long>(r.bad[1]),
                static_cast<long long>(r.bad[2]), static_cast<long long>(r.bad[3]));
    for (const auto& [message, reason] : r.bad_files) {
      std::printf("    %-12s %s\n", reason.c_str(), message.c_str());
    }
  }
}

// --json: the same report as numbers; images by their longer side keyed by the bucket's bound
// ("64" ... "2048", then "larger").
nlohmann::ordered_json report_json(const std::string& path, const data::Dataset& dataset,
                                   const data::DatasetReport& r) {
  nlohmann::ordered_json classes = nlohmann::ordered_json::array();
  for (size_t c = 0; c < r.per_class.size(); ++c) {
    classes.push_back({{"name", dataset.class_names()[c]}, {"samples", r.per_class[c]}});
  }
  nlohmann::ordered_json sides = nlohmann::ordered_json::object();
  for (size_t b = 0; b < r.by_longer_side.size(); ++b) {
    const std::string bucket = b < data::DatasetReport::kSideBounds.size()
                                   ? std::to_string(data::DatasetReport::kSideBounds[b])
                                   : "larger";
    sides[bucket] = r.by_longer_side[b];
  }
  nlohmann::ordered_json bad_files = nlohmann::ordered_json::array();
  for (const auto& [message, reason] : r.bad_files) {
    bad_files.push_back({{"reason", reason}, {"message", message}});
  }
  return {{"path", path},
          {"samples", r.samples},
          {"classes", classes},
          {"min_width", r.min_width},
          {"max_width", r.max_width},
          {"min_height", r.min_height},
          {"max_height", r.max_height},
          {"by_longer_side", sides},
          {"bad",
           {{"unreadable", r.bad[0]},
            {"truncated", r.bad[1]},
            {"undecodable", r.bad[2]},
            {"too_large", r.bad[3]}}},
          {"bad_total", r.bad_total()},
          {"bad_files", bad_files}};
}

// A split of token data: its shards with their tokens and largest id, the windows the usable
// ones hold, and, as image data lists its bad files, each shard that cannot be used with why.
struct TokenSplit {
  nlohmann::ordered_json json;
  std::vector<DataError> bad;
};

TokenSplit inspect_token_split(const std::string& dir, const std::string& split, int64_t seq_len,
                               const data::Tokenizer& tokenizer) {
  const data::TokenShard::Expect expect{tokenizer.vocab_size(), tokenizer.fingerprint()};
  TokenSplit out;
  std::vector<data::TokenShard> usable;
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  nlohmann::ordered_json bad_shards = nlohmann::ordered_json::array();
  for (const std::string& path : data::TokenWindows::shard_paths(dir, split)) {
    try {
      usable.push_back(data::TokenShard::open(path, expect));
      const data::TokenShard& shard = usable.back();
      shards.push_back(
          {{"path", path}, {"tokens", shard.size()}, {"max_token_id", shard.max_token()}});
    } catch (const DataError& e) {
      bad_shards.push_back({{"path", path}, {"message", e.what()}, {"fields", e.fields()}});
      out.bad.push_back(e);
    }
  }
  int64_t tokens = 0, windows = 0;
  if (!usable.empty()) {
    const data::TokenWindows w(std::move(usable), seq_len, 0);
    tokens = w.tokens();
    windows = w.total_windows();
  }
  out.json = {{"tokens", tokens},
              {"windows", windows},
              {"seq_len", seq_len},
              {"shards", shards},
              {"bad_total", bad_shards.size()},
              {"bad_shards", bad_shards}};
  return out;
}

// data.source tokens: tokens per split and shard, checked against the folder's tokenizer. A
// shard that cannot be used (another tokenizer's, damaged, an id outside the vocabulary) is
// reported with the others and then fails the command with its DataError: training could not
// use it either, nothing skips a token shard.
int inspect_tokens(const Config& config, bool json) {
  const std::string& dir = config.data.path;
  const int64_t seq_len = train::token_seq_len(config);
  const std::string tokenizer_file = data::tokenizer_file_in(dir);
  if (tokenizer_file.empty()) data::TokenWindows::shard_paths(dir, "train");  // says what lacks
  const data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_file);
  nlohmann::ordered_json out = {{"path", dir},
                                {"vocab_size", tokenizer.vocab_size()},
                                {"fingerprint", data::fingerprint_hex(tokenizer.fingerprint())}};
  std::vector<DataError> bad;
  for (const char* split : {"train", "val"}) {
    out[split] = nullptr;
    if (!data::has_token_split(dir, split)) continue;
    TokenSplit s = inspect_token_split(dir, split, seq_len, tokenizer);
    out[split] = std::move(s.json);
    bad.insert(bad.end(), s.bad.begin(), s.bad.end());
  }
  out["bad_total"] = bad.size();
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("tokens: %s (vocabulary %d, tokenizer %s)\n", dir.c_str(), tokenizer.vocab_size(),
                out["fingerprint"].get<std::string>().c_str());
    for (const char* split : {"train", "val"}) {
      if (out[split].is_null()) continue;
      const auto& s = out[split];
      std::printf("  %-5s %12lld tokens in %zu shard(s), %lld windows of %lld + 1%s\n", split,
                  s["tokens"].get<long long>(), s["shards"].size(), s["windows"].get<long long>(),
                  s["seq_len"].get<long long>(),
                  s["bad_shards"].empty()
                      ? ""
                      : ("; " + std::to_string(s["bad_shards"].size()) + " bad shard(s)").c_str());
      for (const auto& b : s["bad_shards"]) {
        std::printf("    bad: %s\n", b["message"].get<std::string>().c_str());
      }
    }
  }
  if (bad.empty()) return 0;
  ErrorFields fields = bad.front().fields();
  fields["bad_shards"] = std::to_string(bad.size());
  const std::string more =
      bad.size() > 1 ? " (and " + std::to_string(bad.size() - 1) + " more bad shard(s))" : "";
  throw DataError(bad.front().what() + more, std::move(fields));
}

int run_inspect(const InspectArgs& a) {
  const Config config = load_run_config(a.config_paths, a.overrides);
  if (config.data.source == "tokens") return inspect_tokens(config, a.json);
  const data::DataSets sets = data::open_data_sets(config);
  const int threads = detect_topology().usable_cores;
  const auto train_report =
      data::inspect_dataset(*sets.train, threads, a.decode, config.data.max_pixels);
  nlohmann::ordered_json out = {{"train", report_json(config.data.path, *sets.train, train_report)},
                                {"test", nullptr}};
  if (!a.json) print_report("train", config.data.path, *sets.train, train_report);
  if (sets.test) {
    const std::string path = config.data.val_path.empty() ? config.data.path : config.data.val_path;
    const auto test_report =
        data::inspect_dataset(*sets.test, threads, a.decode, config.data.max_pixels);
    if (a.json) {
      out["test"] = report_json(path, *sets.test, test_report);
    } else {
      print_report("test", path, *sets.test, test_report);
    }
  }
  if (a.json) std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

Command add_data_inspect_command(CLI::App& data) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = data.add_subcommand(
      "inspect", "Samples per class, image sizes and bad files of the data; tokens per split");
  sub->add_option("config", args->config_paths, "YAML configuration files; later ones win");
  add_set_option(sub, args->overrides);
  sub->add_flag("--decode", args->decode,
                "Decode every image fully (slower; also finds damage inside compressed data)");
  sub->add_flag("--json", args->json, "Print the report as one JSON object instead of tables");
  return {sub, [args] { return run_inspect(*args); }};
}

}  // namespace loom::cli
