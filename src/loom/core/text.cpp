#include "loom/core/text.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace loom {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    // Compare against the whole dotted key and against its last part, so that both
    // "train.epoch" and a misplaced top-level "epochs" find "train.epochs".
    size_t d = edit_distance(word, c);
    auto dot = c.find_last_of('.');
    if (dot != std::string::npos) d = std::min(d, edit_distance(word, c.substr(dot + 1)));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // Beyond about a third of the word, the suggestion is noise rather than help.
  size_t limit = std::max<size_t>(2, word.size() / 3 + 1);
  return best_distance <= limit ? best : std::string();
}

std::string join_alternatives(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += (i + 1 == words.size()) ? " or " : ", ";
    out += words[i];
  }
  return out;
}

std::string megabytes(double bytes, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f MB", decimals, bytes / (1 << 20));
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * share);
  return buf;
}

std::string milliseconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", 1e3 * seconds);
  return buf;
}

std::string format_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::vector<int64_t> divisors(int64_t n, int64_t least) {
  std::vector<int64_t> out;
  for (int64_t d = std::max<int64_t>(1, least); d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::string divisors_in_words(int64_t n, int64_t least) {
  std::vector<std::string> words;
  for (int64_t d : divisors(n, least)) words.push_back(std::to_string(d));
  return words.empty() ? std::string("none") : join_alternatives(words);
}

}  // namespace loom
