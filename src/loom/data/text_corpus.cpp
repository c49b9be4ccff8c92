#include "loom/data/text_corpus.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::data {

struct TextCorpus::File {
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
  file_->handle = gzopen(path.c_str(), "rb");  // gzread reads plain files as they are
  if (!file_->handle) throw DataError("corpus '" + path + "': cannot be opened");
  gzbuffer(file_->handle, 1 << 17);
  return true;
}

std::optional<std::string> TextCorpus::next_line() {
  if (!file_ && !open_next()) return std::nullopt;
  std::string line;
  char chunk[8192];
  while (true) {
    if (gzgets(file_->handle, chunk, sizeof(chunk)) == nullptr) {
      if (!line.empty()) return line;  // a last line without a line break
      if (!open_next()) return std::nullopt;
      continue;
    }
    const size_t n = std::strlen(chunk);
    bytes_read_ += static_cast<int64_t>(n);
    line.append(chunk, n);
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
  }
}

std::optional<std::string> TextCorpus::next_paragraph() {
  std::string paragraph;
  while (auto line = next_line()) {
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
