// Fine-tuning pairs: JSON Lines files whose every line is an object {"prompt": "...",
// "response": "..."} (plain or gzip-compressed). Each pair becomes the tokens of its prompt, then
// of its response, then the end-of-text id; only the response and the end-of-text count as
// targets (token_shard.h's loss mask), so that the model learns to answer, not to ask.
//
// A line that is not such an object is a corrupt sample: counted, named on stderr (the first
// few, by file and line), and skipped. Blank lines are skipped silently.
//
// Threading: one reader per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/data/text_corpus.h"

namespace loom::data {

struct PromptPair {
  std::string prompt, response;
};

// Whether `path` names a pairs file: it ends in .jsonl or .jsonl.gz.
bool is_prompt_pairs_file(const std::string& path);

class PromptPairs {
 public:
  // Throws DataError naming the first file that cannot be opened.
  explicit PromptPairs(std::vector<std::string> paths, bool quiet = false);

  // The next well-formed pair; nullopt after the last line of the last file.
  std::optional<PromptPair> next();
  int64_t skipped() const { return skipped_; }  // malformed lines so far
  int64_t bytes_read() const;

 private:
  std::vector<std::string> paths_;
  size_t file_ = 0;
  int64_t line_ = 0;  // in the current file
  std::optional<TextCorpus> corpus_;
  int64_t bytes_done_ = 0;  // of files already read
  int64_t skipped_ = 0;
  bool quiet_;
};

}  // namespace loom::data
