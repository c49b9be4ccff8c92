#include "loom/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loom/core/error.h"

namespace loom {
namespace {

[[noreturn]] void unopenable(const std::string& path, const std::string& what) {
  throw DataError("'" + path + "' " + what + ": " + std::strerror(errno),
                  {{"path", path}, {"problem", "unopenable"}});
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, Access access) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) unopenable(path, "cannot be opened");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    unopenable(path, "cannot be read");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<std::size_t>(st.st_size);
  if (file->size_ > 0) {
    const bool copy = access == Access::kPrivateCopy;
    void* mapped = ::mmap(nullptr, file->size_, copy ? PROT_READ | PROT_WRITE : PROT_READ,
                          copy ? MAP_PRIVATE : MAP_SHARED, fd, 0);
    const int error = errno;
    ::close(fd);
    errno = error;
    if (mapped == MAP_FAILED) unopenable(path, "cannot be mapped");
    file->data_ = static_cast<unsigned char*>(mapped);
  } else {
    ::close(fd);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace loom
