#include "loom/comm/cluster_roles.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/topology.h"

namespace loom::comm {
namespace {

constexpr size_t kMaxHosts = 65536;  // as Slurm's own hostlist

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Splits at the commas that are not inside brackets.
std::vector<std::string> top_level_items(const std::string& list, const std::string& what) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) {
      throw ConfigError(what + ": unbalanced brackets in '" + list + "'",
                        {{"key", what}, {"value", list}, {"problem", "unbalanced_brackets"}});
    }
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) {
    throw ConfigError(what + ": '[' without ']' in '" + list + "'",
                      {{"key", what}, {"value", list}, {"problem", "unclosed_bracket"}});
  }
  items.push_back(current);
  return items;
}

// `key` is the variable or option the digits came from, when `what` says more than its name.
uint64_t parse_index(const std::string& digits, const std::string& what,
                     const std::string& key = "") {
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw ConfigError(
        what + ": '" + digits + "' is not a node number",
        {{"key", key.empty() ? what : key}, {"value", digits}, {"problem", "not_a_number"}});
  }
  return std::strtoull(digits.c_str(), nullptr, 10);
}

std::vector<std::string> expand_item(const std::string& item, const std::string& what) {
  const auto open = item.find('[');
  if (open == std::string::npos) return {item};
  const auto close = item.find(']', open);
  const std::vector<std::string> rest = expand_item(item.substr(close + 1), what);
  std::vector<std::string> out;
  for (const std::string& range : top_level_items(item.substr(open + 1, close - open - 1), what)) {
    const auto dash = range.find('-');
    const std::string low_text = range.substr(0, dash);
    const uint64_t low = parse_index(low_text, what);
    const uint64_t high =
        dash == std::string::npos ? low : parse_index(range.substr(dash + 1), what);
    if (high < low) {
      throw ConfigError(what + ": range '" + range + "' runs backwards",
                        {{"key", what}, {"value", range}, {"problem", "backwards"}});
    }
    for (uint64_t v = low; v <= high; ++v) {
      std::string number = std::to_string(v);
      // The low bound's width is the field's: [01-10] -> 01 .. 10.
      if (number.size() < low_text.size()) {
        number.insert(0, low_text.size() - number.size(), '0');
      }
      for (const std::string& tail : rest) {
        if (out.size() >= kMaxHosts) {
          throw ConfigError(what + ": more than 65536 hosts",
                            {{"key", what},
                             {"allowed", std::to_string(kMaxHosts)},
                             {"problem", "too_many_hosts"}});
        }
        out.push_back(item.substr(0, open) + number + tail);
      }
    }
  }
  return out;
}

// `fields` says where the roles came from (a file's "path"); each error adds its own.
void check_roles(const ClusterRoles& r, const std::string& where, const ErrorFields& fields) {
  const auto with = [&fields](ErrorFields more) {
    more.insert(fields.begin(), fields.end());
    return more;
  };
  if (r.data_worker_hosts.empty()) {
    throw ConfigError(where + ": no host would preprocess data",
                      with({{"problem", "no_data_workers"}}));
  }
  if (r.trainer_hosts.empty()) {
    throw ConfigError(where + ": no host would train", with({{"problem", "no_trainers"}}));
  }
  for (const auto& h : r.data_worker_hosts) {
    if (contains(r.trainer_hosts, h)) {
      throw ConfigError(where + ": host " + h + " is both a trainer and a data worker",
                        with({{"host", h}, {"problem", "both_roles"}}));
    }
  }
  if (!contains(r.trainer_hosts, r.this_host) && !contains(r.data_worker_hosts, r.this_host)) {
    throw ConfigError(where + ": this host, " + r.this_host +
                          ", is in no group (trainers: " + joined(r.trainer_hosts) +
                          "; data workers: " + joined(r.data_worker_hosts) + ")",
                      with({{"host", r.this_host}, {"problem", "host_in_no_group"}}));
  }
}

}  // namespace

bool ClusterRoles::is_data_worker() const { return contains(data_worker_hosts, this_host); }

int ClusterRoles::node_rank() const {
  const auto it = std::find(trainer_hosts.begin(), trainer_hosts.end(), this_host);
  return it == trainer_hosts.end() ? -1 : static_cast<int>(it - trainer_hosts.begin());
}

std::string ClusterRoles::describe() const {
  const int rank = node_rank();
  return "roles from the " + source + ": trainers " +
         (trainer_hosts.empty() ? "the hosts not listed" : joined(trainer_hosts)) +
         "; data workers " + joined(data_worker_hosts) + "; this host (" + this_host + ") " +
         (is_data_worker() ? "is a data worker"
          : rank >= 0      ? "trains as node " + std::to_string(rank)
                           : "trains");
}

std::vector<std::string> expand_slurm_hostlist(const std::string& list, const std::string& what) {
  std::vector<std::string> hosts;
  for (const std::string& item : top_level_items(list, what)) {
    if (item.empty()) continue;
    for (std::string& h : expand_item(item, what)) hosts.push_back(std::move(h));
  }
  if (hosts.empty()) {
    throw ConfigError(what + ": no hosts in '" + list + "'",
                      {{"key", what}, {"value", list}, {"problem", "no_hosts"}});
  }
  return hosts;
}

ClusterRoles roles_from_sagemaker(const std::string& json_text, const std::string& origin,
                                  const std::string& data_group) {
  ClusterRoles r;
  r.source = "SageMaker " + origin;
  std::vector<std::string> groups;
  try {
    const nlohmann::json config = nlohmann::json::parse(json_text);
    r.this_host = config.at("current_host").get<std::string>();
    if (!config.contains("instance_groups")) {
      throw ConfigError(origin + ": no \"instance_groups\": not a heterogeneous cluster",
                        {{"path", origin}, {"problem", "no_instance_groups"}});
    }
    for (const auto& group : config.at("instance_groups")) {
      const auto name = group.at("instance_group_name").get<std::string>();
      groups.push_back(name);
      auto& into = name == data_group ? r.data_worker_hosts : r.trainer_hosts;
      for (const auto& host : group.at("hosts")) into.push_back(host.get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(
        origin + ": not a SageMaker resource configuration (" + std::string(e.what()) + ")",
        {{"path", origin}, {"problem", "not_resource_config"}});
  }
  if (!contains(groups, data_group)) {
    throw ConfigError(origin + ": no instance group named '" + data_group +
                          "' (--data-group; groups: " + joined(groups) + ")",
                      {{"key", "--data-group"},
                       {"value", data_group},
                       {"allowed", joined(groups)},
                       {"path", origin},
                       {"problem", "unknown_group"}});
  }
  check_roles(r, origin, {{"path", origin}});
  return r;
}

ClusterRoles roles_from_slurm(const EnvLookup& env, const std::string& data_group) {
  ClusterRoles r;
  r.source = "Slurm heterogeneous job";
  const char* size_text = env("SLURM_HET_SIZE") ? env("SLURM_HET_SIZE") : env("SLURM_PACK_SIZE");
  if (!size_text) {
    throw ConfigError("SLURM_HET_SIZE: not set: not a Slurm heterogeneous job",
                      {{"key", "SLURM_HET_SIZE"}, {"problem", "missing"}});
  }
  const uint64_t size = parse_index(size_text, "SLURM_HET_SIZE");
  const uint64_t data =
      parse_index(data_group, "--data-group (a Slurm component number)", "--data-group");
  if (data >= size) {
    throw ConfigError(
        "--data-group: component " + data_group + ", but the job has " + std::to_string(size),
        {{"key", "--data-group"},
         {"value", data_group},
         {"allowed", size == 0 ? std::string("none") : "0.." + std::to_string(size - 1)},
         {"problem", "no_such_component"}});
  }
  for (uint64_t n = 0; n < size; ++n) {
    const std::string het = "SLURM_JOB_NODELIST_HET_GROUP_" + std::to_string(n);
    const std::string pack = "SLURM_JOB_NODELIST_PACK_GROUP_" + std::to_string(n);
    const char* list = env(het.c_str()) ? env(het.c_str()) : env(pack.c_str());
    if (!list) {
      throw ConfigError(het + ": not set (SLURM_HET_SIZE is " + size_text + ")",
                        {{"key", het}, {"problem", "missing"}});
    }
    auto& into = n == data ? r.data_worker_hosts : r.trainer_hosts;
    for (std::string& h : expand_slurm_hostlist(list, het)) into.push_back(std::move(h));
  }
  r.this_host = env("SLURMD_NODENAME") ? env("SLURMD_NODENAME") : host_name("");
  check_roles(r, "Slurm heterogeneous job", {});
  return r;
}

ClusterRoles roles_from_list(const std::vector<std::string>& data_worker_hosts,
                             const std::string& this_host) {
  ClusterRoles r;
  r.source = "--data-worker-hosts list";
  r.this_host = this_host.empty() ? host_name("") : this_host;
  r.data_worker_hosts = data_worker_hosts;
  if (r.data_worker_hosts.empty()) {
    throw ConfigError("--data-worker-hosts: no hosts given",
                      {{"key", "--data-worker-hosts"}, {"problem", "no_hosts"}});
  }
  // Trainers are every other host: the launch's own --nnodes / --node-rank / --master say how
  // they find each other.
  return r;
}

}  // namespace loom::comm
