// A POSIX shared-memory segment mapped by every rank of one host, and the layout Loom's shm
// collectives use inside it.
//
// Lifetime: the host's first rank creates the segment, the others map it, and as soon as all have
// mapped it the name is unlinked. From then on it exists only through the mappings, so a crash
// (even SIGKILL) leaves nothing behind in /dev/shm.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::comm {

// A monotonically increasing step counter that peers wait on. It sits alone on its cache line;
// `sleepers` lets the writer skip the futex wake when nobody sleeps.
struct alignas(64) ShmFlag {
  std::atomic<std::uint32_t> value{0};
  std::atomic<std::uint32_t> sleepers{0};

  // Publishes `step` and wakes whoever sleeps on this flag.
  void publish(std::uint32_t step);
};

// What a rank is doing at its current step; peers compare it with their own to catch calls that
// break the ordering contract.
struct ShmCall {
  std::uint64_t sequence = 0;
  std::int32_t kind = 0;   // ShmCommunicator's call kinds
  std::int32_t dtype = 0;  // c10::ScalarType
  std::int64_t numel = 0;
  std::int32_t root = 0;  // broadcast root, or the peer of a send/recv
  std::int32_t padding = 0;
};

struct alignas(64) ShmRankSlot {
  ShmFlag arrived;   // my data of step s is in my staging half
  ShmFlag reduced;   // my reduced slice of step s is in my staging half
  ShmFlag released;  // I have finished reading the peers' halves of step s
  // The call of step s is in call[s & 1]: a peer may still be checking step s while this rank
  // has already begun step s + 1.
  ShmCall call[2];
  std::atomic<std::int32_t> pid{0};
  std::atomic<std::int32_t> failed{0};  // set when this rank gave up; reason below
  char failure[240] = {};
};

struct alignas(64) ShmMailbox {  // one per ordered (sender, receiver) pair
  ShmFlag sent;                  // chunks written
  ShmFlag taken;                 // chunks read
  ShmCall call;
};

class ShmSegment {
 public:
  // Sizes of the data areas: every rank has two staging halves of `chunk_bytes` (double
  // buffering) and every ordered pair a mailbox of `mailbox_bytes`.
  struct Layout {
    int ranks = 0;
    std::size_t chunk_bytes = 0;
    std::size_t mailbox_bytes = 0;
    std::size_t total_bytes() const;
  };

  // Creates (creator) or opens the segment `name` ("/loom-..."), sized for `layout`.
  ShmSegment(const std::string& name, const Layout& layout, bool creator);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Removes the name; mappings stay valid. Called once every rank has mapped the segment.
  void unlink();

  ShmRankSlot& slot(int rank);
  ShmMailbox& mailbox(int sender, int receiver);
  // Staging half `half` (0 or 1) of `rank`.
  char* staging(int rank, int half);
  char* mailbox_data(int sender, int receiver);
  const Layout& layout() const { return layout_; }

 private:
  std::string name_;
  Layout layout_;
  void* base_ = nullptr;
  bool linked_ = false;
};

}  // namespace loom::comm
