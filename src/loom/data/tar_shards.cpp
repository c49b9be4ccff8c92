#include "loom/data/tar_shards.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/data/sample_error.h"

namespace fs = std::filesystem;

namespace loom::data {
namespace {

constexpr int64_t kBlock = 512;

// Numeric header fields: octal text, or base-256 when the top bit of the first byte is set
// (GNU tar's encoding for sizes of 8 GiB and more). -1 for a number no file could hold (a
// 12-byte base-256 field has room for 95 bits).
int64_t header_number(const char* field, size_t length) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(field);
  if (bytes[0] & 0x80) {
    int64_t value = bytes[0] & 0x7F;
    for (size_t i = 1; i < length; ++i) {
      if (value > (INT64_MAX >> 8)) return -1;
      value = (value << 8) | bytes[i];
    }
    return value;
  }
  int64_t value = 0;
  for (size_t i = 0; i < length && field[i]; ++i) {
    if (field[i] >= '0' && field[i] <= '7') value = value * 8 + (field[i] - '0');
  }
  return value;
}

std::string header_text(const char* field, size_t length) {
  return std::string(field, strnlen(field, length));
}

// Reads exactly `size` bytes at `offset`; false at a short read (end of file).
bool read_at(int fd, int64_t offset, char* out, int64_t size) {
  while (size > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(size), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    offset += got;
    size -= got;
  }
  return true;
}

// A decimal count ("123") as a pax record writes it; -1 for anything else, or one over 2^62.
int64_t decimal_count(const std::string& text) {
  if (text.empty() || text.size() > 18) return -1;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// pax extended header records: "<length> <key>=<value>\n" each. Stops at the first record
// whose length cannot be right.
std::map<std::string, std::string> parse_pax(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t space = text.find(' ', at);
    if (space == std::string::npos) break;
    const int64_t length = decimal_count(text.substr(at, space - at));
    if (length < static_cast<int64_t>(space - at + 2) ||
        at + static_cast<size_t>(length) > text.size()) {
      break;
    }
    const std::string record = text.substr(space + 1, at + length - space - 2);  // no newline
    const size_t eq = record.find('=');
    if (eq != std::string::npos) out[record.substr(0, eq)] = record.substr(eq + 1);
    at += length;
  }
  return out;
}

bool is_image_extension(const std::string& ext) {
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

}  // namespace

TarShards::TarShards(const std::string& path) {
  std::vector<std::string> paths;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file() && entry.path().extension() == ".tar") {
        paths.push_back(entry.path().string());
      }
    }
    std::sort(paths.begin(), paths.end());
  } else if (fs::is_regular_file(path)) {
    paths.push_back(path);
  }
  if (paths.empty()) {
    throw DataError("tar shards '" + path + "': not a .tar file or a directory holding some",
                    {{"path", path}, {"problem", "no_shards"}});
  }
  for (const auto& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      for (auto& s : shards_) ::close(s.fd);
      throw DataError("tar shard '" + p + "' cannot be opened: " + std::strerror(errno));
    }
    shards_.push_back({p, fd});
  }
  try {
    for (size_t i = 0; i < shards_.size(); ++i) index_shard(static_cast<int32_t>(i));
  } catch (...) {
    for (auto& s : shards_) ::close(s.fd);
    throw;
  }
  if (samples_.empty()) {
    for (auto& s : shards_) ::close(s.fd);
    throw DataError("tar shards '" + path + "' hold no samples (key.jpg/.jpeg/.png + key.cls)");
  }
  int64_t max_label = 0;
  for (const auto& m : samples_) max_label = std::max(max_label, m.label);
  for (int64_t c = 0; c <= max_label; ++c) classes_.push_back(std::to_string(c));
}

TarShards::~TarShards() {
  for (auto& s : shards_) ::close(s.fd);
}

void TarShards::index_shard(int32_t shard) {
  const Shard& s = shards_[static_cast<size_t>(shard)];
  const int64_t file_size = static_cast<int64_t>(fs::file_size(s.path));
  struct Group {
    int64_t offset = -1, size = 0;
    std::string name;
    int64_t label = -1;
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> order;  // keys in member order
  std::string next_path;           // from a pax 'x' or GNU 'L' entry, for the next member
  int64_t next_size = -1;
  char header[kBlock];
  for (int64_t at = 0; at + kBlock <= file_size;) {
    if (!read_at(s.fd, at, header, kBlock)) break;
    if (std::all_of(header, header + kBlock, [](char c) { return c == 0; })) break;  // the end
    int64_t size = header_number(header + 124, 12);
    if (next_size >= 0) size = next_size;
    if (size < 0) {
      throw DataError("tar shard '" + s.path + "': the member at byte " + std::to_string(at) +
                      " has an impossible size");
    }
    const char type = header[156];
    const int64_t data = at + kBlock;
    if (data + size > file_size) {
      LOOM_LOG(kWarn, "data") << "tar shard '" << s.path << "' is cut short at byte " << file_size
                              << "; using the samples before the cut";
      break;
    }
    at = data + (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'x' || type == 'L') {
      std::string text(static_cast<size_t>(size), '\0');
      if (!read_at(s.fd, data, text.data(), size)) break;
      if (type == 'L') {
        next_path = text.c_str();
      } else {
        auto records = parse_pax(text);
        if (records.count("path")) next_path = records["path"];
        if (records.count("size")) {
          next_size = decimal_count(records["size"]);
          if (next_size < 0) {
            throw DataError("tar shard '" + s.path + "': the pax header at byte " +
                            std::to_string(data - kBlock) + " has a malformed size '" +
                            records["size"] + "'");
          }
        }
      }
      continue;
    }
    std::string name = next_path;
    if (name.empty()) {
      name = header_text(header, 100);
      if (std::memcmp(header + 257, "ustar", 5) == 0 && header[345]) {
        name = header_text(header + 345, 155) + "/" + name;
      }
    }
    next_path.clear();
    next_size = -1;
    if (type != '0' && type != '\0') continue;  // directories, links, global headers
    const size_t slash = name.rfind('/');
    const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
    if (dot == std::string::npos) continue;
    const std::string key = name.substr(0, dot), ext = name.substr(dot + 1);
    auto [it, added] = groups.try_emplace(key);
    if (added) order.push_back(key);
    Group& g = it->second;
    if (is_image_extension(ext)) {
      g.offset = data;
      g.size = size;
      g.name = name;
    } else if (ext == "cls") {
      std::string text(static_cast<size_t>(std::min<int64_t>(size, 32)), '\0');
      read_at(s.fd, data, text.data(), static_cast<int64_t>(text.size()));
      try {
        g.label = std::stoll(text);
      } catch (const std::exception&) {
        throw DataError("tar shard '" + s.path + "': '" + name + "' does not hold a class number");
      }
    }
  }
  for (const auto& key : order) {
    const Group& g = groups[key];
    if (g.offset < 0) continue;  // metadata without an image
    if (g.label < 0) {
      throw DataError("tar shard '" + s.path + "': sample '" + key + "' has no " + key +
                      ".cls with its class number");
    }
    samples_.push_back({shard, g.offset, g.size, g.label, g.name});
  }
}

Sample TarShards::read(int64_t index) const {
  const Member& m = samples_.at(static_cast<size_t>(index));
  const Shard& s = shards_[static_cast<size_t>(m.shard)];
  Sample sample;
  sample.label = m.label;
  sample.key = s.path + ":" + m.name;
  sample.bytes.resize(static_cast<size_t>(m.size));
  if (!read_at(s.fd, m.offset, sample.bytes.data(), m.size)) {
    throw SampleError(SampleFault::kUnreadable, "sample '" + sample.key + "' cannot be read");
  }
  return sample;
}

}  // namespace loom::data
