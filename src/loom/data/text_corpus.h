// The text of a corpus, file after file (plain or gzip-compressed: the same reader serves
// both), as lines or as paragraphs: runs of non-blank lines, joined by spaces, never across the
// end of a file. Paragraphs are the documents of token shards, each ended by the tokenizer's
// end-of-text id. A damaged or truncated compressed file is an error naming it, not a short
// corpus.
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
  // The next line (the held one first) and whether it is the first of its file.
  std::optional<std::string> read_line(bool& first_of_file);

  std::vector<std::string> paths_;
  size_t next_file_ = 0;
  bool at_file_start_ = true;
  std::optional<std::string> held_;  // a file's first line, read while ending a paragraph
  struct File;
  std::unique_ptr<File> file_;
  int64_t bytes_read_ = 0, file_bytes_ = 0;
};

}  // namespace loom::data
