#include "loom/parallel/pipeline/schedule_csv.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "loom/core/error.h"

namespace loom::parallel::pipeline {
namespace {

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// torch.distributed.pipelining's older zero-bubble files write B where they mean I: a B followed,
// on the same rank, by a W of the same stage and micro-batch computed only the input gradient.
// Such a B becomes I, so the file means what its authors meant (a B with no W after it stays).
void read_split_backwards(std::vector<Action>& list) {
  std::map<std::pair<int, int>, size_t> backward_at;  // (stage, micro-batch) -> its B
  for (size_t i = 0; i < list.size(); ++i) {
    const Action& a = list[i];
    const std::pair<int, int> key{a.stage, a.microbatch};
    if (a.kind == ActionKind::kBackward) backward_at[key] = i;
    if (a.kind != ActionKind::kBackwardWeight) continue;
    if (auto b = backward_at.find(key); b != backward_at.end()) {
      list[b->second].kind = ActionKind::kBackwardInput;
      backward_at.erase(b);
    }
  }
}

}  // namespace

std::string schedule_to_csv(const Schedule& schedule) {
  std::string out;
  for (const auto& list : schedule.actions) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out += ',';
      out += to_string(list[i]);
    }
    out += '\n';
  }
  return out;
}

Schedule schedule_from_csv(const std::string& text, const std::string& name) {
  Schedule s;
  s.name = name;
  std::istringstream lines(text);
  std::string line;
  bool has_communication = false;
  int row = 0;
  while (std::getline(lines, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<Action> list;
    std::istringstream cells(line);
    std::string cell;
    int column = 0;
    while (std::getline(cells, cell, ',')) {
      ++column;
      const std::string action = trim(cell);
      if (action.empty()) continue;  // torch writes idle slots as empty cells
      try {
        list.push_back(parse_action(action));
      } catch (const ConfigError& e) {
        throw ConfigError("pipeline schedule '" + name + "', row " + std::to_string(row) +
                          " (rank " + std::to_string(row - 1) + "), cell " +
                          std::to_string(column) + ": " + e.what());
      }
      has_communication |= list.back().is_communication();
    }
    read_split_backwards(list);
    s.actions.push_back(std::move(list));
  }
  // Trailing empty lines are not ranks.
  while (!s.actions.empty() && s.actions.back().empty()) s.actions.pop_back();
  s.ranks = static_cast<int>(s.actions.size());
  if (s.ranks == 0) throw ConfigError("pipeline schedule '" + name + "' has no actions");
  for (const auto& list : s.actions) {
    for (const Action& a : list) {
      s.stages = std::max(s.stages, a.stage + 1);
      s.microbatches = std::max(s.microbatches, a.microbatch + 1);
    }
  }
  // A stage belongs to the rank that computes it; validate() reports any other rank that does.
  s.stage_rank.assign(static_cast<size_t>(s.stages), -1);
  for (int r = 0; r < s.ranks; ++r) {
    for (const Action& a : s.actions[static_cast<size_t>(r)]) {
      int& owner = s.stage_rank[static_cast<size_t>(a.stage)];
      if (a.is_compute() && owner < 0) owner = r;
    }
  }
  for (int stage = 0; stage < s.stages; ++stage) {
    if (s.stage_rank[static_cast<size_t>(stage)] < 0) {
      throw ConfigError("pipeline schedule '" + name + "': no rank computes stage " +
                        std::to_string(stage));
    }
  }
  if (!has_communication) add_communication(s);
  return s;
}

}  // namespace loom::parallel::pipeline
