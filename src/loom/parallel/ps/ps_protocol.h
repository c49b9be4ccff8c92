// The control messages of a parameter-server step (issue 16). Before each synchronised step
// every worker sends every server a fixed-size header; when the part plan changed (the buckets
// were rebuilt in backward order after the first step, or retuned) the header says so and the
// server's share of the new plan follows. Headers travel as int64 tensors over the run's
// Communicator, and a server checks them before it receives any part: a worker of another job,
// a worker whose plan differs from the others' (mismatched part sizes), or one a step ahead is
// an error naming it, never a receive of the wrong size or a hang.
//
// Servers that hold the parameters (async and SSP, or the optimizer on the servers; see
// param_server.h) take requests instead of steps: init, push, pull, fetch, finish, stop, each one
// header from one worker, answered by a Reply and the parameters.
//
// Version 1. Layout: kHeaderWords int64 in the order of StepHeader's fields, magic first.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/parallel/ps/server_load.h"

namespace loom::parallel::ps {

inline constexpr std::int64_t kProtocolMagic = 0x4c4f4f4d50530001;  // "LOOMPS", version 1
inline constexpr std::int64_t kHeaderWords = 12;

enum class Command : std::int64_t {
  kStep = 1,  // sync: the gradient parts of this step follow
  kPlan = 2,  // sync: the server's share of a new plan, then the step's parts
  kStop = 3,  // the worker is done with the servers
  // Parameters held by the servers:
  kInit = 4,    // the share; from worker 0 also the parameters (and optimizer state)
  kPush = 5,    // one step's gradients (or parameter deltas) follow
  kPull = 6,    // the latest parameters, nothing follows
  kFetch = 7,   // the latest parameters and optimizer state, for a checkpoint
  kFinish = 8,  // the worker's last step is pushed; answered once every worker's is
};
inline constexpr std::int64_t kLastCommand = 8;

struct StepHeader {
  std::int64_t job = 0;   // job_hash() of the rendezvous's job token
  std::int64_t step = 0;  // synchronised exchanges before this one
  Command command = Command::kStep;
  std::int64_t workers = 0;  // the sender's view of the roles
  std::int64_t servers = 0;
  std::int64_t plan_version = 0;
  std::int64_t plan_fingerprint = 0;  // share_fingerprint() of this server's share
  std::int64_t parts = 0;             // in this server's share
  std::int64_t dtype = 0;             // c10::ScalarType of every part
  double lr = 0;                      // kPush: the learning rate of the worker's step
  // kInit from worker 0: the optimizer steps its state has taken, when that state follows the
  // parameters (-1: none follows).
  std::int64_t state_steps = -1;
};

// A server's answer to a request for parameters, before the parameter parts (and, for kFetch,
// `state_fields` optimizer tensors per part).
inline constexpr std::int64_t kReplyWords = 4;
struct Reply {
  std::int64_t applied = 0;  // steps of every worker that the parameters hold
  std::int64_t optimizer_steps = 0;
  std::int64_t state_fields = 0;
  std::int64_t staleness = 0;  // steps of the slowest worker these parameters lack
};
at::Tensor encode_reply(const Reply& reply);
Reply decode_reply(const at::Tensor& words, const std::string& sender);

bool same_header(const StepHeader& a, const StepHeader& b);

// A worker's header to one server: `share` is that server's part sizes (fingerprinted with
// `dtype`); lr and state_steps stay at their defaults.
StepHeader make_header(std::int64_t job, std::int64_t step, Command command, int workers,
                       int servers, std::int64_t plan_version,
                       const std::vector<std::int64_t>& share, c10::ScalarType dtype);

at::Tensor encode_header(const StepHeader& header);
// An int64 tensor of kHeaderWords to receive a header into.
at::Tensor header_buffer();
// Throws Error naming `sender` for a message that is not a version-1 header.
StepHeader decode_header(const at::Tensor& words, const std::string& sender);
// "push", "finish", ... ("step" for a sync step and its plan).
const char* command_name(Command command);
// "step 12 (plan 2, 3 parts, float)", for errors.
std::string describe(const StepHeader& header);

// A server's running totals, sent to worker rank 0 after each step: kLoadWords doubles.
inline constexpr std::int64_t kLoadWords = 7;
at::Tensor encode_load(const ServerLoad& load);
ServerLoad decode_load(const at::Tensor& words);

// A hash of a share's part sizes and type: equal on every worker that planned alike.
std::int64_t share_fingerprint(const std::vector<std::int64_t>& share, std::int64_t dtype);
// A hash of the job token, the same on every rank of one job.
std::int64_t job_hash(const std::string& job);

}  // namespace loom::parallel::ps
