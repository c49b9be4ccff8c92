// Roles on a heterogeneous cluster from its own description: SageMaker's resourceconfig.json
// (the format of AWS's heterogeneous-cluster examples), Slurm's heterogeneous-job variables and
// node lists, and a plain list.
#include "loom/comm/cluster_roles.h"

#include <gtest/gtest.h>

#include <map>

#include "loom/core/error.h"

namespace loom::comm {
namespace {

// As SageMaker writes it on algo-2 of a job with a "data_group" of two ml.c5.xlarge and a
// "dnn_group" of one ml.g5.xlarge (unknown keys, such as "topology", are ignored).
std::string resource_config(const std::string& current_host) {
  return R"({"current_group_name": "data_group", "current_host": ")" + current_host + R"(",
    "current_instance_type": "ml.c5.xlarge", "hosts": ["algo-1", "algo-2", "algo-3"],
    "instance_groups": [
      {"hosts": ["algo-3", "algo-2"], "instance_group_name": "data_group",
       "instance_type": "ml.c5.xlarge"},
      {"hosts": ["algo-1"], "instance_group_name": "dnn_group", "instance_type": "ml.g5.xlarge"}],
    "network_interface_name": "eth0", "topology": null})";
}

// The fields of the ConfigError that `f` throws: what a program reads instead of the message.
template <typename F>
ErrorFields config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.fields();
  }
  ADD_FAILURE() << "no ConfigError";
  return {};
}

TEST(ClusterRoles, SageMakerGroupsDecideEachHostsRole) {
  const ClusterRoles worker =
      roles_from_sagemaker(resource_config("algo-2"), "rc.json", "data_group");
  EXPECT_TRUE(worker.is_data_worker());
  EXPECT_EQ(worker.data_worker_hosts, (std::vector<std::string>{"algo-3", "algo-2"}));
  EXPECT_EQ(worker.trainer_hosts, (std::vector<std::string>{"algo-1"}));
  EXPECT_EQ(worker.node_rank(), -1);
  const ClusterRoles trainer =
      roles_from_sagemaker(resource_config("algo-1"), "rc.json", "data_group");
  EXPECT_FALSE(trainer.is_data_worker());
  EXPECT_EQ(trainer.node_rank(), 0);
  // The summary a user reads at start-up: the one place its wording is the point.
  EXPECT_NE(trainer.describe().find("this host (algo-1) trains as node 0"), std::string::npos)
      << trainer.describe();
  // Another name for the data group, and the errors that name what is wrong.
  EXPECT_TRUE(
      roles_from_sagemaker(resource_config("algo-1"), "rc.json", "dnn_group").is_data_worker());
  EXPECT_EQ(config_error([] { roles_from_sagemaker(resource_config("algo-1"), "rc.json", "cpu"); }),
            (ErrorFields{{"key", "--data-group"},
                         {"value", "cpu"},
                         {"allowed", "data_group, dnn_group"},
                         {"path", "rc.json"},
                         {"problem", "unknown_group"}}));
  EXPECT_EQ(
      config_error(
          [] { roles_from_sagemaker(resource_config("algo-9"), "rc.json", "data_group"); }),
      (ErrorFields{{"host", "algo-9"}, {"path", "rc.json"}, {"problem", "host_in_no_group"}}));
  EXPECT_EQ(config_error([] {
              roles_from_sagemaker(R"({"current_host": "algo-1", "hosts": ["algo-1"]})", "rc.json",
                                   "data_group");
            }),
            (ErrorFields{{"path", "rc.json"}, {"problem", "no_instance_groups"}}));
  EXPECT_EQ(config_error([] { roles_from_sagemaker("{", "rc.json", "data_group"); }),
            (ErrorFields{{"path", "rc.json"}, {"problem", "not_resource_config"}}));
}

TEST(ClusterRoles, SlurmNodeListsExpandAsSlurmDoes) {
  EXPECT_EQ(expand_slurm_hostlist("node[01-03,7],gpu5", "x"),
            (std::vector<std::string>{"node01", "node02", "node03", "node7", "gpu5"}));
  EXPECT_EQ(expand_slurm_hostlist("n[8-10]", "x"), (std::vector<std::string>{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_hostlist("r[0-1]b[1-2]", "x"),
            (std::vector<std::string>{"r0b1", "r0b2", "r1b1", "r1b2"}));
  EXPECT_EQ(expand_slurm_hostlist("n[1-2].ib", "x"), (std::vector<std::string>{"n1.ib", "n2.ib"}));
  EXPECT_EQ(config_error([] { expand_slurm_hostlist("n[3-1]", "LIST"); }),
            (ErrorFields{{"key", "LIST"}, {"value", "3-1"}, {"problem", "backwards"}}));
  EXPECT_EQ(config_error([] { expand_slurm_hostlist("n[1-2", "LIST"); }),
            (ErrorFields{{"key", "LIST"}, {"value", "n[1-2"}, {"problem", "unclosed_bracket"}}));
  EXPECT_EQ(config_error([] { expand_slurm_hostlist("n[a]", "LIST"); }),
            (ErrorFields{{"key", "LIST"}, {"value", "a"}, {"problem", "not_a_number"}}));
}

TEST(ClusterRoles, SlurmHeterogeneousJobComponents) {
  std::map<std::string, std::string> vars = {{"SLURM_HET_SIZE", "2"},
                                             {"SLURM_JOB_NODELIST_HET_GROUP_0", "gpu[1-2]"},
                                             {"SLURM_JOB_NODELIST_HET_GROUP_1", "cpu[01-03]"},
                                             {"SLURMD_NODENAME", "gpu2"}};
  auto env = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  const ClusterRoles trainer = roles_from_slurm(env, "1");
  EXPECT_EQ(trainer.node_rank(), 1);
  EXPECT_EQ(trainer.data_worker_hosts, (std::vector<std::string>{"cpu01", "cpu02", "cpu03"}));
  vars["SLURMD_NODENAME"] = "cpu02";
  EXPECT_TRUE(roles_from_slurm(env, "1").is_data_worker());
  EXPECT_EQ(config_error([&] { roles_from_slurm(env, "2"); }),
            (ErrorFields{{"key", "--data-group"},
                         {"value", "2"},
                         {"allowed", "0..1"},
                         {"problem", "no_such_component"}}));
  EXPECT_EQ(config_error([&] { roles_from_slurm(env, "x"); }),
            (ErrorFields{{"key", "--data-group"}, {"value", "x"}, {"problem", "not_a_number"}}));
  // Slurm before 20.02 names them _PACK_GROUP_.
  vars.erase("SLURM_JOB_NODELIST_HET_GROUP_1");
  EXPECT_EQ(config_error([&] { roles_from_slurm(env, "1"); }),
            (ErrorFields{{"key", "SLURM_JOB_NODELIST_HET_GROUP_1"}, {"problem", "missing"}}));
  vars["SLURM_JOB_NODELIST_PACK_GROUP_1"] = "cpu[01-03]";
  EXPECT_TRUE(roles_from_slurm(env, "1").is_data_worker());
  vars.erase("SLURM_HET_SIZE");
  EXPECT_EQ(config_error([&] { roles_from_slurm(env, "1"); }),
            (ErrorFields{{"key", "SLURM_HET_SIZE"}, {"problem", "missing"}}));
}

TEST(ClusterRoles, APlainListOfDataWorkerHosts) {
  EXPECT_TRUE(roles_from_list({"a", "b"}, "b").is_data_worker());
  const ClusterRoles trainer = roles_from_list({"a", "b"}, "c");
  EXPECT_FALSE(trainer.is_data_worker());
  EXPECT_EQ(trainer.node_rank(), -1);          // the launch's --node-rank says it
  EXPECT_TRUE(trainer.trainer_hosts.empty());  // the launch's other hosts
  EXPECT_EQ(config_error([] { roles_from_list({}, "c"); }),
            (ErrorFields{{"key", "--data-worker-hosts"}, {"problem", "no_hosts"}}));
}

}  // namespace
}  // namespace loom::comm
