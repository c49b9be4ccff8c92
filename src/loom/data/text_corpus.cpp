#include "loom/data/text_corpus.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::data {

struct TextCorpus::File {
  std::string path;
  gzFile handle = nullptr;
  ~File() {
    if (handle) gzclose(handle);
  }
};

TextCorpus::TextCorpus(std::vector<std::string> paths) : paths_(std::move(paths)) {
  if (paths_.empty()) throw ConfigError("corpus: no text files given");
  for (const std::string& path : paths_) {
    std::error_code error;
    const auto size = std::filesystem::file_size(path, error);
    if (error) throw DataError("corpus '" + path + "': cannot be read: " + error.message());
    file_bytes_ += static_cast<int64_t>(size);
  }
}

TextCorpus::~TextCorpus() = default;

bool TextCorpus::open_next() {
  file_.reset();
  if (next_file_ >= paths_.size()) return false;
  const std::string& path = paths_[next_file_++];
  file_ = std::make_unique<File>();
  file_->path = path;
  file_->handle = gzopen(path.c_str(), "rb");  // gzread reads plain files as they are
  if (!file_->handle) throw DataError("corpus '" + path + "': cannot be opened");
  gzbuffer(file_->handle, 1 << 17);
  at_file_start_ = true;
  return true;
}

std::optional<std::string> TextCorpus::read_line(bool& first_of_file) {
  if (held_) {  // the first line of a file, read while ending the paragraph before it
    first_of_file = true;
    std::optional<std::string> line = std::move(held_);
    held_.reset();
    return line;
  }
  if (!file_ && !open_next()) return std::nullopt;
  std::string line;
  char chunk[8192];
  while (true) {
    first_of_file = at_file_start_;
    if (gzgets(file_->handle, chunk, sizeof(chunk)) == nullptr) {
      int code = Z_OK;
      const char* why = gzerror(file_->handle, &code);
      if (code != Z_OK && code != Z_STREAM_END) {
        throw DataError("corpus '" + file_->path + "': " + (why ? why : "unreadable") + " after " +
                        std::to_string(bytes_read_) + " bytes of text");
      }
      if (!line.empty()) break;  // a last line without a line break
      if (!open_next()) return std::nullopt;
      continue;
    }
    const size_t n = std::strlen(chunk);
    bytes_read_ += static_cast<int64_t>(n);
    line.append(chunk, n);
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      if (!line.empty() && line.back() == '\r') line.pop_back();
      break;
    }
  }
  at_file_start_ = false;
  return line;
}

std::optional<std::string> TextCorpus::next_line() {
  bool first_of_file = false;
  return read_line(first_of_file);
}

std::optional<std::string> TextCorpus::next_paragraph() {
  std::string paragraph;
  bool first_of_file = false;
  while (std::optional<std::string> line = read_line(first_of_file)) {
    if (first_of_file && !paragraph.empty()) {
      held_ = std::move(line);  // a new file ends the paragraph
      return paragraph;
    }
    const bool blank = line->find_first_not_of(" \t") == std::string::npos;
    if (blank) {
      if (!paragraph.empty()) return paragraph;
      continue;
    }
    if (!paragraph.empty()) paragraph += ' ';
    paragraph += *line;
  }
  if (!paragraph.empty()) return paragraph;
  return std::nullopt;
}

}  // namespace loom::data
