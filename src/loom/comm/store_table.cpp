#include "loom/comm/store_table.h"

#include <cerrno>
#include <cstdlib>

namespace loom::comm {

using namespace store_protocol;

namespace {

Message ok(std::vector<std::string> fields = {}) { return {kOk, std::move(fields)}; }
Message failed(const std::string& why) { return {kFailed, {why}}; }

// c10d's stores keep counters as decimal text; anything else under the key is not a counter.
std::optional<std::int64_t> parse_counter(const std::string& text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

}  // namespace

bool StoreTable::all_exist(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (!values_.count(key)) return false;
  }
  return true;
}

std::optional<Message> StoreTable::apply(const Message& request) {
  const auto& f = request.fields;
  auto wants = [&](std::size_t n) { return f.size() == n; };
  auto malformed = [&] {
    return failed("malformed request (operation " + std::to_string(request.code) + " with " +
                  std::to_string(f.size()) + " fields)");
  };
  switch (request.code) {
    case kSet:
      if (!wants(2)) return malformed();
      values_[f[0]] = f[1];
      ++version_;
      return ok();
    case kGet: {
      if (!wants(1)) return malformed();
      auto it = values_.find(f[0]);
      if (it == values_.end()) return std::nullopt;
      return ok({it->second});
    }
    case kAdd: {
      if (!wants(2) || f[1].size() != 8) return malformed();
      std::int64_t now = 0;
      if (auto it = values_.find(f[0]); it != values_.end()) {
        const auto before = parse_counter(it->second);
        if (!before) return failed("add: key '" + f[0] + "' does not hold a counter");
        now = *before;
      }
      if (__builtin_add_overflow(now, decode_int(f[1]), &now)) {
        return failed("add: key '" + f[0] + "' would overflow");
      }
      values_[f[0]] = std::to_string(now);
      ++version_;
      return ok({encode_int(now)});
    }
    case kCheck:
      return ok({all_exist(f) ? "1" : "0"});
    case kDelete:
      if (!wants(1)) return malformed();
      return ok({values_.erase(f[0]) ? "1" : "0"});
    case kNumKeys:
      if (!wants(0)) return malformed();
      return ok({encode_int(static_cast<std::int64_t>(values_.size()))});
    case kWait:
      if (!all_exist(f)) return std::nullopt;
      return ok();
    case kCompareSet: {
      if (!wants(3)) return malformed();
      auto it = values_.find(f[0]);
      if (it == values_.end()) {
        if (!f[1].empty()) return ok({f[1]});  // c10d: a missing key answers `expected`
        it = values_.emplace(f[0], f[2]).first;
        ++version_;
      } else if (it->second == f[1]) {
        it->second = f[2];
        ++version_;
      }
      return ok({it->second});
    }
    case kAuth:
      return failed("already authenticated");
    default:
      return failed("unknown operation " + std::to_string(request.code));
  }
}

}  // namespace loom::comm
