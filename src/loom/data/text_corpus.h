// The text of a corpus, file after file (plain or gzip-compressed: the same reader serves
// both), as lines or as paragraphs: runs of non-blank lines, joined by spaces. Paragraphs are
// the documents of token shards, each ended by the tokenizer's end-of-text id.
//
// Threading: one reader per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom::data {

class TextCorpus {
 public:
  // Throws DataError naming the first file that cannot be opened.
  explicit TextCorpus(std::vector<std::string> paths);
  ~TextCorpus();
  TextCorpus(const TextCorpus&) = delete;
  TextCorpus& operator=(const TextCorpus&) = delete;

  // The next line without its line break; nullopt at the end of the last file.
  std::optional<std::string> next_line();
  // The next paragraph; nullopt at the end.
  std::optional<std::string> next_paragraph();
  // Bytes of (uncompressed) text read so far, and the files' bytes on disk in all.
  int64_t bytes_read() const { return bytes_read_; }
  int64_t file_bytes() const { return file_bytes_; }

 private:
  bool open_next();

  std::vector<std::string> paths_;
  size_t next_file_ = 0;
  struct File;
  std::unique_ptr<File> file_;
  int64_t bytes_read_ = 0, file_bytes_ = 0;
};

}  // namespace loom::data
