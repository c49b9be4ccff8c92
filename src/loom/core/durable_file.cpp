#include "loom/core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"

namespace loom {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error(what + " '" + path + "' failed: " + std::strerror(errno));
}

}  // namespace

SyncedWriter::SyncedWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("opening", path);
}

SyncedWriter::~SyncedWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SyncedWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing", path_);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void SyncedWriter::close() {
  if (::fsync(fd_) != 0) fail("fsync of", path_);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing", path_);
}

void write_synced(const std::string& path, std::string_view bytes) {
  SyncedWriter writer(path);
  writer.write(bytes.data(), bytes.size());
  writer.close();
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("opening directory", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("fsync of directory", dir);
}

void replace_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  write_synced(tmp, bytes);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming into", path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_directory(dir.empty() ? "." : dir);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("reading '" + path + "' failed: cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace loom
