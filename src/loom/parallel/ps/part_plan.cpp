#include "loom/parallel/ps/part_plan.h"

#include <algorithm>
#include <cstdio>

#include "loom/core/error.h"

namespace loom::parallel::ps {

std::vector<std::int64_t> PartPlan::server_bytes() const {
  std::vector<std::int64_t> bytes(static_cast<size_t>(servers), 0);
  for (const Part& p : parts) bytes[static_cast<size_t>(p.server)] += p.elements * element_bytes;
  return bytes;
}

std::int64_t PartPlan::largest_part_bytes() const {
  std::int64_t largest = 0;
  for (const Part& p : parts) largest = std::max(largest, p.elements * element_bytes);
  return largest;
}

std::string PartPlan::describe() const {
  // Megabytes, or kilobytes where parts are smaller than one.
  const bool small = largest_part_bytes() < (1 << 20);
  const double unit = small ? 1 << 10 : 1 << 20;
  const char* name = small ? "KB" : "MB";
  char head[96];
  std::snprintf(head, sizeof head, "%zu parts of <= %.1f %s over %d server%s:", parts.size(),
                static_cast<double>(largest_part_bytes()) / unit, name, servers,
                servers == 1 ? "" : "s");
  std::string out = head;
  const std::vector<std::int64_t> bytes = server_bytes();
  for (size_t s = 0; s < bytes.size(); ++s) {
    char amount[32];
    std::snprintf(amount, sizeof amount, "%s%.1f", s == 0 ? " " : " / ",
                  static_cast<double>(bytes[s]) / unit);
    out += amount;
  }
  return out + " " + name;
}

PartPlan plan_parts(const std::vector<std::int64_t>& buffer_elements, std::int64_t element_bytes,
                    std::int64_t part_bytes, int servers, std::int64_t min_part_bytes) {
  if (servers < 1 || element_bytes < 1 || part_bytes < element_bytes || min_part_bytes < 1) {
    throw Error("plan_parts: " + std::to_string(servers) + " servers, parts of " +
                std::to_string(part_bytes) + " bytes, elements of " +
                std::to_string(element_bytes) +
                " bytes (need at least one server and one element per part)");
  }
  PartPlan plan;
  plan.servers = servers;
  plan.element_bytes = element_bytes;
  const std::int64_t part_elements = part_bytes / element_bytes;
  std::vector<std::int64_t> load(static_cast<size_t>(servers), 0);
  for (size_t b = 0; b < buffer_elements.size(); ++b) {
    const std::int64_t n = buffer_elements[b];
    if (n < 0) throw Error("plan_parts: buffer " + std::to_string(b) + " has negative size");
    if (n == 0) continue;
    // As few parts as the size allows, equal to one element: a buffer of 2.1 parts' bytes is
    // three parts of 0.7, not two full ones and a sliver. But at least one per server while
    // parts stay above the floor: otherwise a model whose gradients fill one bucket below the
    // part size would load one server and leave the others idle.
    std::int64_t count = (n + part_elements - 1) / part_elements;
    const std::int64_t spread = std::min<std::int64_t>(servers, n * element_bytes / min_part_bytes);
    count = std::max(count, spread);
    // And a multiple of the servers where it takes several parts per server anyway: then every
    // server gets the same number of the buffer's parts, equal within one element, so the
    // servers' bytes end within one element per buffer of each other instead of one part (with
    // 47 parts of 1 MB over 4 servers, one part was a 9% difference in their work).
    if (count >= servers) count = std::min(n, (count + servers - 1) / servers * servers);
    std::int64_t offset = 0;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t elements = n / count + (i < n % count ? 1 : 0);
      const auto least = std::min_element(load.begin(), load.end());
      const int server = static_cast<int>(least - load.begin());
      *least += elements * element_bytes;
      plan.parts.push_back({static_cast<int>(b), offset, elements, server});
      offset += elements;
    }
  }
  return plan;
}

}  // namespace loom::parallel::ps
