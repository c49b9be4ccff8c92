#include "loom/comm/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

constexpr std::size_t kAlign = 4096;

std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::size_t control_bytes(int ranks) {
  return round_up(sizeof(ShmRankSlot) * ranks + sizeof(ShmMailbox) * ranks * ranks);
}

}  // namespace

void ShmFlag::publish(std::uint32_t step) {
  value.store(step, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) {
    // Not FUTEX_PRIVATE: the waiters are other processes.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&value), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
  }
}

std::size_t ShmSegment::Layout::total_bytes() const {
  return control_bytes(ranks) + round_up(chunk_bytes) * 2 * ranks +
         round_up(mailbox_bytes) * ranks * ranks;
}

ShmSegment::ShmSegment(const std::string& name, const Layout& layout, bool creator)
    : name_(name), layout_(layout) {
  const int flags = creator ? (O_RDWR | O_CREAT | O_EXCL) : O_RDWR;
  const int fd = ::shm_open(name.c_str(), flags, 0600);
  if (fd < 0) {
    throw CommError("shm: cannot " + std::string(creator ? "create" : "open") + " segment " + name +
                    ": " + std::strerror(errno));
  }
  linked_ = true;
  const std::size_t bytes = layout.total_bytes();
  if (creator && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    ::close(fd);
    unlink();
    throw CommError("shm: cannot size segment " + name + " to " + std::to_string(bytes >> 20) +
                    " MiB: " + std::strerror(error) + " (is /dev/shm large enough?)");
  }
  base_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    if (creator) unlink();
    throw CommError("shm: cannot map segment " + name + ": " + std::strerror(errno));
  }
  if (creator) {
    // Fresh pages are zero; placement-new makes the atomics' lifetime explicit.
    for (int r = 0; r < layout.ranks; ++r) new (&slot(r)) ShmRankSlot();
    for (int s = 0; s < layout.ranks; ++s) {
      for (int d = 0; d < layout.ranks; ++d) new (&mailbox(s, d)) ShmMailbox();
    }
  }
}

ShmSegment::~ShmSegment() {
  if (base_) ::munmap(base_, layout_.total_bytes());
  unlink();
}

void ShmSegment::unlink() {
  if (linked_) {
    ::shm_unlink(name_.c_str());  // every rank may try; only the first succeeds
    linked_ = false;
  }
}

ShmRankSlot& ShmSegment::slot(int rank) { return reinterpret_cast<ShmRankSlot*>(base_)[rank]; }

ShmMailbox& ShmSegment::mailbox(int sender, int receiver) {
  auto* boxes = reinterpret_cast<ShmMailbox*>(static_cast<char*>(base_) +
                                              sizeof(ShmRankSlot) * layout_.ranks);
  return boxes[sender * layout_.ranks + receiver];
}

char* ShmSegment::staging(int rank, int half) {
  return static_cast<char*>(base_) + control_bytes(layout_.ranks) +
         round_up(layout_.chunk_bytes) * (2 * rank + half);
}

char* ShmSegment::mailbox_data(int sender, int receiver) {
  return static_cast<char*>(base_) + control_bytes(layout_.ranks) +
         round_up(layout_.chunk_bytes) * 2 * layout_.ranks +
         round_up(layout_.mailbox_bytes) * (sender * layout_.ranks + receiver);
}

}  // namespace loom::comm
