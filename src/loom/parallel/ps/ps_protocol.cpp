#include "loom/parallel/ps/ps_protocol.h"

#include <ATen/ATen.h>

#include <cstring>

#include "loom/core/error.h"

namespace loom::parallel::ps {
namespace {

// FNV-1a over 64-bit words: stable across hosts and builds, unlike std::hash.
std::int64_t fnv1a(const std::vector<std::int64_t>& words) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::int64_t w : words) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (static_cast<std::uint64_t>(w) >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return static_cast<std::int64_t>(h);
}

// A double's bits in an int64 word, so that headers stay one tensor of integers.
std::int64_t lr_bits(double value) {
  std::int64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
double lr_of(std::int64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

at::Tensor encode_header(const StepHeader& h) {
  const std::vector<std::int64_t> words = {
      kProtocolMagic, h.job,     h.step,         static_cast<std::int64_t>(h.command),
      h.workers,      h.servers, h.plan_version, h.plan_fingerprint,
      h.parts,        h.dtype,   lr_bits(h.lr),  h.state_steps};
  return at::tensor(words, at::kLong);
}

bool same_header(const StepHeader& a, const StepHeader& b) {
  return a.job == b.job && a.step == b.step && a.command == b.command && a.workers == b.workers &&
         a.servers == b.servers && a.plan_version == b.plan_version &&
         a.plan_fingerprint == b.plan_fingerprint && a.parts == b.parts && a.dtype == b.dtype &&
         a.lr == b.lr && a.state_steps == b.state_steps;
}

StepHeader make_header(std::int64_t job, std::int64_t step, Command command, int workers,
                       int servers, std::int64_t plan_version,
                       const std::vector<std::int64_t>& share, c10::ScalarType dtype) {
  StepHeader header;
  header.job = job;
  header.step = step;
  header.command = command;
  header.workers = workers;
  header.servers = servers;
  header.plan_version = plan_version;
  header.plan_fingerprint = share_fingerprint(share, static_cast<std::int64_t>(dtype));
  header.parts = static_cast<std::int64_t>(share.size());
  header.dtype = static_cast<std::int64_t>(dtype);
  return header;
}

at::Tensor header_buffer() { return at::zeros({kHeaderWords}, at::kLong); }

StepHeader decode_header(const at::Tensor& words, const std::string& sender) {
  if (words.scalar_type() != at::kLong || words.numel() != kHeaderWords) {
    throw Error("ps: a step header from " + sender + " is not " + std::to_string(kHeaderWords) +
                " int64 words");
  }
  const std::int64_t* w = words.data_ptr<std::int64_t>();
  if (w[0] != kProtocolMagic) {
    throw Error("ps: " + sender +
                " sent a message that is not a version-1 parameter-server header (a worker of "
                "another program or Loom version?)");
  }
  StepHeader h;
  h.job = w[1];
  h.step = w[2];
  if (w[3] < 1 || w[3] > kLastCommand) {
    throw Error("ps: " + sender + " sent an unknown command " + std::to_string(w[3]));
  }
  h.command = static_cast<Command>(w[3]);
  h.workers = w[4];
  h.servers = w[5];
  h.plan_version = w[6];
  h.plan_fingerprint = w[7];
  h.parts = w[8];
  h.dtype = w[9];
  h.lr = lr_of(w[10]);
  h.state_steps = w[11];
  if (h.parts < 0 || h.dtype < 0 || h.state_steps < -1 ||
      h.dtype >= static_cast<std::int64_t>(c10::ScalarType::NumOptions)) {
    throw Error("ps: " + sender + " sent a header with " + std::to_string(h.parts) +
                " parts of type " + std::to_string(h.dtype));
  }
  return h;
}

const char* command_name(Command command) {
  // A sync plan announcement is still that step's header.
  static const char* const kNames[] = {"",     "step", "step",  "stop",  "init",
                                       "push", "pull", "fetch", "finish"};
  const auto i = static_cast<std::int64_t>(command);
  return i >= 1 && i <= kLastCommand ? kNames[i] : "unknown";
}

std::string describe(const StepHeader& h) {
  const char* command = command_name(h.command);
  return std::string(command) + " " + std::to_string(h.step) + " (plan " +
         std::to_string(h.plan_version) + ", " + std::to_string(h.parts) + " parts of " +
         c10::toString(static_cast<c10::ScalarType>(h.dtype)) + ")";
}

at::Tensor encode_reply(const Reply& r) {
  return at::tensor(
      std::vector<std::int64_t>{r.applied, r.optimizer_steps, r.state_fields, r.staleness},
      at::kLong);
}

Reply decode_reply(const at::Tensor& words, const std::string& sender) {
  const std::int64_t* w = words.data_ptr<std::int64_t>();
  Reply r{w[0], w[1], w[2], w[3]};
  if (r.applied < 0 || r.optimizer_steps < 0 || r.state_fields < 0 || r.state_fields > 16) {
    throw Error("ps: " + sender + " answered with a malformed reply (" + std::to_string(r.applied) +
                ", " + std::to_string(r.state_fields) + " fields)");
  }
  return r;
}

at::Tensor encode_load(const ServerLoad& load) {
  return at::tensor({static_cast<double>(load.steps), static_cast<double>(load.bytes_in),
                     static_cast<double>(load.bytes_out), load.sum_seconds, load.active_seconds,
                     static_cast<double>(load.max_staleness), load.busy_seconds},
                    at::kDouble);
}

ServerLoad decode_load(const at::Tensor& words) {
  const double* v = words.data_ptr<double>();
  return {static_cast<std::int64_t>(v[0]),
          static_cast<std::int64_t>(v[1]),
          static_cast<std::int64_t>(v[2]),
          v[3],
          v[4],
          static_cast<std::int64_t>(v[5]),
          v[6]};
}

std::int64_t share_fingerprint(const std::vector<std::int64_t>& share, std::int64_t dtype) {
  std::vector<std::int64_t> words = share;
  words.push_back(dtype);
  return fnv1a(words);
}

std::int64_t job_hash(const std::string& job) {
  std::vector<std::int64_t> words;
  for (unsigned char c : job) words.push_back(c);
  return fnv1a(words);
}

}  // namespace loom::parallel::ps
