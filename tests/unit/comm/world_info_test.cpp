#include "loom/comm/world_info.h"

#include <gtest/gtest.h>

#include <map>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

// An environment made of exactly these variables.
EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(WorldInfo, NoLauncherMeansAWorldOfOne) {
  const auto info = world_from_environment(env_of({}));
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world, 1);
  EXPECT_EQ(info.launcher, "single process");
}

TEST(WorldInfo, TorchrunVariables) {
  const auto info = world_from_environment(env_of({{"RANK", "3"},
                                                   {"WORLD_SIZE", "4"},
                                                   {"LOCAL_RANK", "1"},
                                                   {"LOCAL_WORLD_SIZE", "2"},
                                                   {"MASTER_ADDR", "10.0.0.5"},
                                                   {"MASTER_PORT", "29600"}}));
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world, 4);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world, 2);
  EXPECT_EQ(info.master_addr, "10.0.0.5");
  EXPECT_EQ(info.master_port, 29600);
  EXPECT_FALSE(info.store_served_by_launcher);
}

// torchrun's agent shares its store with the ranks unless told not to
// (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, which leaves the variable unset or "False").
TEST(WorldInfo, TorchrunsAgentStoreIsUsedWhereTorchrunSharesIt) {
  const std::map<std::string, std::string> ranks = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29600"}};
  auto with = [&](std::map<std::string, std::string> more) {
    more.insert(ranks.begin(), ranks.end());
    return world_from_environment(env_of(more));
  };
  auto info = with({{"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_TRUE(info.store_is_torchruns);
  EXPECT_TRUE(info.store_served_by_launcher);
  info = with({{"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_FALSE(info.store_is_torchruns);
  EXPECT_FALSE(info.store_served_by_launcher);
  // loom launch under torchrun's variables serves Loom's store itself.
  info = with({{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"LOOM_LAUNCH_ID", "abc"}});
  EXPECT_FALSE(info.store_is_torchruns);
  EXPECT_TRUE(info.store_served_by_launcher);
}

// loom launch's count of restarts, else torchrun's, else none; either malformed names itself.
TEST(WorldInfo, RestartCountFromLoomLaunchOrTorchrun) {
  EXPECT_EQ(restart_count_from_environment(env_of({})), 0);
  EXPECT_EQ(restart_count_from_environment(env_of({{"TORCHELASTIC_RESTART_COUNT", "2"}})), 2);
  EXPECT_EQ(restart_count_from_environment(
                env_of({{"LOOM_RESTART_COUNT", "1"}, {"TORCHELASTIC_RESTART_COUNT", "2"}})),
            1);
  for (const char* name : {"LOOM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"}) {
    try {
      restart_count_from_environment(env_of({{name, "-1"}}));
      ADD_FAILURE() << name << " -1 was taken";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), name) << e.what();
    }
  }
}

TEST(WorldInfo, LoomLaunchServesTheStore) {
  const auto info = world_from_environment(env_of(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOOM_LAUNCH_ID", "abc"}, {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(info.launcher, "loom launch");
  EXPECT_TRUE(info.store_served_by_launcher);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
}

TEST(WorldInfo, OpenMpiVariables) {
  const auto info = world_from_environment(env_of({{"OMPI_COMM_WORLD_RANK", "5"},
                                                   {"OMPI_COMM_WORLD_SIZE", "8"},
                                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  EXPECT_EQ(info.launcher, "openmpi");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world, 4);
}

TEST(WorldInfo, SlurmVariablesAndNodeList) {
  const auto info = world_from_environment(env_of({{"SLURM_PROCID", "2"},
                                                   {"SLURM_NTASKS", "4"},
                                                   {"SLURM_LOCALID", "0"},
                                                   {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                                   {"SLURM_JOB_NODELIST", "gpu[07-08]"}}));
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world, 4);
  EXPECT_EQ(info.local_world, 2);
  EXPECT_EQ(info.master_addr, "gpu07");
}

TEST(WorldInfo, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("a1,b2"), "a1");
  EXPECT_EQ(first_slurm_host("node[03-05,9],gpu1"), "node03");
  EXPECT_EQ(first_slurm_host("node[9,3]"), "node9");
  EXPECT_EQ(first_slurm_host("x1,node[2-3]"), "x1");
}

TEST(WorldInfo, InconsistentVariablesNameTheVariable) {
  try {
    world_from_environment(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
    FAIL() << "RANK=2 of 2 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "RANK") << e.what();
    EXPECT_EQ(e.field("value"), "2") << e.what();
    EXPECT_EQ(e.field("allowed"), "0..1") << e.what();
    EXPECT_EQ(e.field("world_key"), "WORLD_SIZE") << e.what();
    EXPECT_EQ(e.field("problem"), "rank_not_below_world") << e.what();
  }
  try {
    world_from_environment(env_of({{"RANK", "0"}, {"WORLD_SIZE", "two"}}));
    FAIL() << "WORLD_SIZE=two accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "WORLD_SIZE") << e.what();
    EXPECT_EQ(e.field("value"), "two") << e.what();
    EXPECT_EQ(e.field("problem"), "not_a_count") << e.what();
  }
  try {
    world_from_environment(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}));
    FAIL() << "MASTER_PORT=70000 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "MASTER_PORT") << e.what();
    EXPECT_EQ(e.field("problem"), "not_a_port") << e.what();
  }
}

}  // namespace
}  // namespace loom::comm
