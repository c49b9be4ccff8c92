// Small text helpers shared by error messages and names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Whether `text` begins / ends with `part` (std::string's own from C++20).
inline bool starts_with(std::string_view text, std::string_view part) {
  return text.substr(0, part.size()) == part;
}
inline bool ends_with(std::string_view text, std::string_view part) {
  return text.size() >= part.size() && text.substr(text.size() - part.size()) == part;
}

// Levenshtein edit distance (insertions, deletions, substitutions all cost 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" when none is within a plausible typo distance.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// A number for messages, as printf's %g writes it ("0.08", "1e-06", "224").
std::string format_number(double x);

// "a, b or c"
std::string join_alternatives(const std::vector<std::string>& words);

// The sizes that would work where a count must divide `n`: its divisors at least `least`, as
// "1, 2 or 4" (for the message) ...
std::vector<int64_t> divisors(int64_t n, int64_t least = 1);
// ... and as text, "1, 2 or 4".
std::string divisors_in_words(int64_t n, int64_t least = 1);

// The figures messages and advice quote: "12 MB" (MiB, with `decimals` after the point), "45%"
// of a share in [0, 1], "3.2 ms" of seconds.
std::string megabytes(double bytes, int decimals = 0);
std::string percent(double share);
std::string milliseconds(double seconds);

}  // namespace loom
