#include "loom/parallel/same_model_check.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "loom/core/error.h"

namespace loom::parallel {
namespace {

// "'fc.weight' [10, 64] float", one line per tensor.
std::vector<std::string> describe(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : tensors) {
    std::string shape;
    for (int64_t size : t.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(size);
    lines.push_back("'" + name + "' [" + shape + "] " +
                    std::string(c10::toString(t.scalar_type())));
  }
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  return lines;
}

// Rank 0's text on every rank.
std::string rank0_text(const std::string& mine, comm::Communicator& comm) {
  at::Tensor length = at::tensor({static_cast<int64_t>(mine.size())}, at::kLong);
  comm.broadcast(length, 0)->wait(comm.options().timeout);
  at::Tensor bytes = at::empty({length.item<int64_t>()}, at::kByte);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  comm.broadcast(bytes, 0)->wait(comm.options().timeout);
  return std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
}

}  // namespace

void check_same_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                        comm::Communicator& comm, const std::string& what) {
  const std::vector<std::string> mine = describe(tensors);
  const std::string text = joined(mine);
  // The fingerprint's low 53 bits travel exactly as a double.
  const auto fingerprint =
      static_cast<int64_t>(std::hash<std::string>{}(text) & ((uint64_t{1} << 53) - 1));
  at::Tensor all = at::zeros({comm.world()}, at::kLong);
  comm.allgather(at::tensor({fingerprint}, at::kLong), all)->wait(comm.options().timeout);
  const int64_t* prints = all.data_ptr<int64_t>();
  std::string differing;
  for (int r = 1; r < comm.world(); ++r) {
    if (prints[r] != prints[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (differing.empty()) return;
  const std::vector<std::string> theirs = split_lines(rank0_text(text, comm));
  const std::string here = "rank " + std::to_string(comm.rank());
  if (prints[comm.rank()] == prints[0]) {
    throw Error(what + ": rank(s) " + differing + " of " + std::to_string(comm.world()) +
                    " hold a model that differs from rank 0's (their errors name the first "
                    "difference)",
                {{"problem", "models_differ"}, {"ranks", differing}});
  }
  for (std::size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
    const std::string a = i < theirs.size() ? theirs[i] : "missing";
    const std::string b = i < mine.size() ? mine[i] : "missing";
    if (a == b) continue;
    throw Error(what + ": the model differs between ranks: tensor " + std::to_string(i) + " is " +
                    a + " on rank 0 and " + b + " on " + here + " (" +
                    std::to_string(theirs.size()) + " tensors on rank 0, " +
                    std::to_string(mine.size()) + " here)",
                {{"problem", "models_differ"},
                 {"rank", std::to_string(comm.rank())},
                 {"index", std::to_string(i)},
                 {"rank0_tensor", a},
                 {"tensor", b}});
  }
  throw Error(what + ": the model differs between rank 0 and " + here,
              {{"problem", "models_differ"}, {"rank", std::to_string(comm.rank())}});
}

}  // namespace loom::parallel
