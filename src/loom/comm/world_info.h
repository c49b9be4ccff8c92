// Who am I in the job: rank, world size and where the rendezvous store is, discovered from the
// environment a launcher left. Understood launchers, in order of precedence:
//   loom launch / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//   MASTER_PORT Open MPI:               OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (+
//   MASTER_ADDR/PORT) Slurm:                  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//   SLURM_NTASKS_PER_NODE or
//                           SLURM_TASKS_PER_NODE, master = MASTER_ADDR or the first host of
//                           SLURM_JOB_NODELIST
// With none of them the process is a world of one.
#pragma once

#include <functional>
#include <string>

namespace loom::comm {

struct WorldInfo {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // "loom launch", "torchrun", "openmpi", "slurm" or "single process".
  std::string launcher = "single process";
  // The launcher already serves the store (loom launch does); otherwise rank 0 serves it.
  bool store_served_by_launcher = false;
  // That store is torchrun's: its agent serves a c10d TCPStore at MASTER_ADDR:MASTER_PORT for
  // the ranks to share (TORCHELASTIC_USE_AGENT_STORE=True, torchrun's default since torch 2.2),
  // which Loom's ranks use as torch's own do, instead of a store of Loom's.
  bool store_is_torchruns = false;
  // The job's shared secret for the store (LOOM_STORE_TOKEN; "" = none). Never printed.
  std::string store_token;
};

// Reads a variable; returns nullptr when unset. Tests pass a map instead of the environment.
using EnvLookup = std::function<const char*(const char*)>;

// Throws ConfigError naming the variable when one is malformed or inconsistent
// (e.g. "RANK=3 is not below WORLD_SIZE=2").
WorldInfo world_from_environment(const EnvLookup& env);
WorldInfo world_from_environment();

// How many times the job was restarted before this attempt: LOOM_RESTART_COUNT, set by `loom
// launch --max-restarts`, else TORCHELASTIC_RESTART_COUNT, set by torchrun's, else 0. Throws
// ConfigError naming the variable when it is not a count.
int restart_count_from_environment(const EnvLookup& env);

// The first host of a Slurm node list: "node[03-05,9],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace loom::comm
