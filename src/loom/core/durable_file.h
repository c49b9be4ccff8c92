// Files that survive a crash: data is fsync'ed before it is renamed into place, and the
// directory is fsync'ed after, so a reader sees either the old file or the whole new one.
#pragma once

#include <string>
#include <string_view>

namespace loom {

// Writes `bytes` to `path` and fsyncs it. Throws Error naming the path on failure.
void write_synced(const std::string& path, std::string_view bytes);

// Appends whole chunks to an open file and fsyncs on close.
class SyncedWriter {
 public:
  explicit SyncedWriter(const std::string& path);
  ~SyncedWriter();
  SyncedWriter(const SyncedWriter&) = delete;
  SyncedWriter& operator=(const SyncedWriter&) = delete;

  void write(const void* data, size_t bytes);
  void close();  // fsync + close; throws on failure

 private:
  std::string path_;
  int fd_ = -1;
};

void fsync_directory(const std::string& dir);

// write_synced to "<path>.tmp", rename over `path`, fsync the directory.
void replace_file_atomically(const std::string& path, std::string_view bytes);

std::string read_file(const std::string& path);

}  // namespace loom
