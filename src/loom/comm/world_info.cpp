#include "loom/comm/world_info.h"

#include <cstdlib>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

int parse_count(const EnvLookup& env, const char* name) {
  const char* value = env(name);
  char* end = nullptr;
  const long parsed = value ? std::strtol(value, &end, 10) : -1;
  if (!value || *value == '\0' || *end != '\0' || parsed < 0 || parsed > 1 << 20) {
    throw ConfigError(std::string("environment variable ") + name + ": expected a count, got '" +
                          (value ? value : "(unset)") + "'",
                      {{"key", name},
                       {"value", value ? value : ""},
                       {"problem", value ? "not_a_count" : "missing"}});
  }
  return static_cast<int>(parsed);
}

int parse_optional(const EnvLookup& env, const char* name, int fallback) {
  return env(name) ? parse_count(env, name) : fallback;
}

void read_master(const EnvLookup& env, WorldInfo& info) {
  if (const char* addr = env("MASTER_ADDR"); addr && *addr) info.master_addr = addr;
  info.master_port = parse_optional(env, "MASTER_PORT", info.master_port);
  // 0 is allowed: the rank that serves the store then binds a free port (Rendezvous).
  if (info.master_port < 0 || info.master_port > 65535) {
    throw ConfigError("environment variable MASTER_PORT: " + std::to_string(info.master_port) +
                          " is not a TCP port",
                      {{"key", "MASTER_PORT"},
                       {"value", std::to_string(info.master_port)},
                       {"allowed", "0..65535"},
                       {"problem", "not_a_port"}});
  }
}

// "2(x3),1" -> 2: the task count of the first node.
int first_task_count(const std::string& tasks_per_node) {
  return std::atoi(tasks_per_node.c_str());
}

void check(const WorldInfo& info, const char* rank_name, const char* world_name) {
  if (info.world < 1) {
    throw ConfigError(
        std::string("environment variable ") + world_name + " must be at least 1",
        {{"key", world_name}, {"value", std::to_string(info.world)}, {"problem", "below_one"}});
  }
  if (info.rank >= info.world) {
    throw ConfigError(std::string(rank_name) + "=" + std::to_string(info.rank) + " is not below " +
                          world_name + "=" + std::to_string(info.world),
                      {{"key", rank_name},
                       {"value", std::to_string(info.rank)},
                       {"allowed", "0.." + std::to_string(info.world - 1)},
                       {"world_key", world_name},
                       {"problem", "rank_not_below_world"}});
  }
  if (info.local_world < 1 || info.local_rank >= info.local_world ||
      info.local_world > info.world) {
    throw ConfigError("local rank " + std::to_string(info.local_rank) + " of " +
                          std::to_string(info.local_world) + " does not fit a world of " +
                          std::to_string(info.world) + " (" + info.launcher + " environment)",
                      {{"value", std::to_string(info.local_rank)},
                       {"local_world", std::to_string(info.local_world)},
                       {"world", std::to_string(info.world)},
                       {"launcher", info.launcher},
                       {"problem", "local_rank_does_not_fit"}});
  }
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  const auto bracket = nodelist.find('[');
  const auto comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);
  }
  const std::string prefix = nodelist.substr(0, bracket);
  const auto end = nodelist.find_first_of("-,]", bracket + 1);
  return prefix + nodelist.substr(bracket + 1, end - bracket - 1);
}

WorldInfo world_from_environment(const EnvLookup& env) {
  WorldInfo info;
  if (env("RANK") || env("WORLD_SIZE")) {
    const bool loom_launch = env("LOOM_LAUNCH_ID") != nullptr;
    info.launcher = loom_launch ? "loom launch" : "torchrun";
    info.rank = parse_count(env, "RANK");
    info.world = parse_count(env, "WORLD_SIZE");
    info.local_rank = parse_optional(env, "LOCAL_RANK", info.rank);
    info.local_world = parse_optional(env, "LOCAL_WORLD_SIZE", info.world);
    read_master(env, info);
    const char* agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
    info.store_is_torchruns = !loom_launch && agent_store && std::string(agent_store) == "True";
    info.store_served_by_launcher = loom_launch || info.store_is_torchruns;
    check(info, "RANK", "WORLD_SIZE");
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    info.launcher = "openmpi";
    info.rank = parse_count(env, "OMPI_COMM_WORLD_RANK");
    info.world = parse_count(env, "OMPI_COMM_WORLD_SIZE");
    info.local_rank = parse_optional(env, "OMPI_COMM_WORLD_LOCAL_RANK", info.rank);
    info.local_world = parse_optional(env, "OMPI_COMM_WORLD_LOCAL_SIZE", info.world);
    read_master(env, info);
    check(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  } else if (env("SLURM_PROCID")) {
    info.launcher = "slurm";
    info.rank = parse_count(env, "SLURM_PROCID");
    info.world = parse_count(env, "SLURM_NTASKS");
    info.local_rank = parse_optional(env, "SLURM_LOCALID", 0);
    if (env("SLURM_NTASKS_PER_NODE")) {
      info.local_world = parse_count(env, "SLURM_NTASKS_PER_NODE");
    } else if (const char* tasks = env("SLURM_TASKS_PER_NODE")) {
      info.local_world = first_task_count(tasks);
    } else {
      info.local_world = info.world;
    }
    const char* nodes =
        env("SLURM_JOB_NODELIST") ? env("SLURM_JOB_NODELIST") : env("SLURM_NODELIST");
    if (nodes && *nodes) info.master_addr = first_slurm_host(nodes);
    read_master(env, info);
    check(info, "SLURM_PROCID", "SLURM_NTASKS");
  }
  if (const char* token = env("LOOM_STORE_TOKEN")) info.store_token = token;
  return info;
}

int restart_count_from_environment(const EnvLookup& env) {
  if (env("LOOM_RESTART_COUNT")) return parse_count(env, "LOOM_RESTART_COUNT");
  return parse_optional(env, "TORCHELASTIC_RESTART_COUNT", 0);
}

WorldInfo world_from_environment() {
  return world_from_environment([](const char* name) { return std::getenv(name); });
}

}  // namespace loom::comm
