// A whole file mapped into memory, read-only or as a private copy-on-write view, unmapped when
// the last holder lets go. Readers of large files (token shards, safetensors weights) hand out
// tensors and views over it instead of copies: the file's pages are the page cache's, read on
// first touch and dropped under memory pressure, so reading a checkpoint does not hold its bytes
// twice. The file may be replaced or unlinked while mapped, never truncated or written in place:
// a mapped page past a new end of file faults. Loom writes checkpoints into a new folder renamed
// into place, and `loom export` refuses a folder that holds a model.
//
// Threading: immutable once made; share it across threads freely.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace loom {

class MappedFile {
 public:
  enum class Access {
    kReadOnly,     // writing through data() faults
    kPrivateCopy,  // writes change this process's copy of a page, never the file
  };
  // Throws DataError with fields path and problem "unopenable" when the file cannot be opened,
  // read or mapped. An empty file maps to size() 0 and a null data().
  static std::shared_ptr<const MappedFile> open(const std::string& path,
                                                Access access = Access::kReadOnly);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Page-aligned. With kPrivateCopy the bytes may be written (the process's own copy of a page).
  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  std::string path_;
};

}  // namespace loom
