#include "loom/data/prompt_pairs.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/core/text.h"

namespace loom::data {
namespace {

constexpr int64_t kSkipsNamed = 5;  // malformed lines named on stderr; the rest are counted

// The pair on `line`, or why it is not one.
std::optional<PromptPair> parse_pair(const std::string& line, std::string& problem) {
  const nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    problem = "not JSON";
    return std::nullopt;
  }
  if (!value.is_object()) {
    problem = "not a JSON object";
    return std::nullopt;
  }
  PromptPair pair;
  for (auto [key, out] : {std::pair{"prompt", &pair.prompt}, {"response", &pair.response}}) {
    const auto field = value.find(key);
    if (field == value.end() || !field->is_string()) {
      problem = std::string("no string \"") + key + "\"";
      return std::nullopt;
    }
    *out = field->get<std::string>();
  }
  return pair;
}

}  // namespace

bool is_prompt_pairs_file(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz");
}

PromptPairs::PromptPairs(std::vector<std::string> paths, bool quiet)
    : paths_(std::move(paths)), quiet_(quiet) {
  if (!paths_.empty()) corpus_.emplace(std::vector<std::string>{paths_.front()});
}

int64_t PromptPairs::bytes_read() const {
  return bytes_done_ + (corpus_ ? corpus_->bytes_read() : 0);
}

std::optional<PromptPair> PromptPairs::next() {
  while (corpus_) {
    std::optional<std::string> line = corpus_->next_line();
    if (!line) {
      bytes_done_ += corpus_->bytes_read();
      corpus_.reset();
      line_ = 0;
      if (++file_ < paths_.size()) corpus_.emplace(std::vector<std::string>{paths_[file_]});
      continue;
    }
    ++line_;
    if (line->find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string problem;
    if (std::optional<PromptPair> pair = parse_pair(*line, problem)) return pair;
    if (++skipped_ <= kSkipsNamed && !quiet_) {
      std::fprintf(stderr,
                   "skipped %s:%lld: %s (a line must be {\"prompt\": ..., \"response\": ...})\n",
                   paths_[file_].c_str(), static_cast<long long>(line_), problem.c_str());
    }
  }
  return std::nullopt;
}

}  // namespace loom::data
