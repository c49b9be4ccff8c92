// What `loom launch` does with its ranks' output: every line a rank writes to stdout or stderr
// reaches the launcher's own stdout or stderr whole, after a prefix naming the rank
// ("[rank 1] Traceback ..."), as torchrun's --log-line-prefix-template does. Without it, two
// ranks that fail at once interleave their tracebacks character by character.
//
// Each rank gets two pipes; one thread reads them all (poll) and writes each complete line with
// one write(2), so lines from different ranks never mix. A line with no end yet waits for its
// end, up to kMaxLine bytes. The relay outlives the ranks: finish() drains what they left in the
// pipes (a rank's last words are written before it exits) and ends lines still open.
//
// Threading: attach(), drain() and finish() are called by the launcher's thread; the relay's
// thread reads the pipes and writes the launcher's stdout and stderr; a mutex keeps them apart.
#pragma once

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace loom::cli {

// "${role}", "${rank}", "${local_rank}" and "${node}" in `format` replaced by the rank's values.
std::string rank_line_prefix(const std::string& format, const std::string& role, int rank,
                             int local_rank, int node);

class RankOutputRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;  // a longer line is cut and each piece prefixed

  RankOutputRelay();
  ~RankOutputRelay();  // finish()es if not done
  RankOutputRelay(const RankOutputRelay&) = delete;
  RankOutputRelay& operator=(const RankOutputRelay&) = delete;

  // The write ends for a rank's stdout and stderr (close-on-exec: the child dup2()s them onto 1
  // and 2, then the launcher calls close_child_ends()). Before the first start() only.
  struct ChildEnds {
    int out = -1, err = -1;
  };
  ChildEnds attach(const std::string& prefix);
  // After the child holding them has been forked.
  void close_child_ends(ChildEnds ends);

  void start();  // the relay's thread, once every rank is attached
  // Passes on at once what the ranks have written so far: before the launcher speaks of a
  // rank's end, so that its message comes after the rank's last lines.
  void drain();
  void finish();  // after every rank has ended: drains the pipes, ends open lines, joins

 private:
  struct Stream {
    int fd = -1;     // the read end
    int target = 1;  // the launcher's fd the lines go to
    std::string prefix;
    std::string pending;  // the start of a line whose end has not come
    bool open = true;
  };
  void run();
  void read_stream(Stream& s);
  void write_lines(Stream& s, bool end_open_line);

  std::mutex mutex_;  // over the streams: the relay's thread and drain() both read them
  std::vector<Stream> streams_;
  int wake_[2] = {-1, -1};  // finish() writes a byte to end the thread's poll
  std::thread thread_;
  bool finished_ = false;
};

}  // namespace loom::cli
