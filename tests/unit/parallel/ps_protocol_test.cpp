#include "loom/parallel/ps/ps_protocol.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "loom/core/error.h"

namespace loom::parallel::ps {
namespace {

StepHeader sample_header() {
  StepHeader h;
  h.job = job_hash("job-a");
  h.step = 41;
  h.command = Command::kPlan;
  h.workers = 4;
  h.servers = 2;
  h.plan_version = 2;
  h.parts = 3;
  h.dtype = static_cast<std::int64_t>(at::kBFloat16);
  h.plan_fingerprint = share_fingerprint({10, 11, 12}, h.dtype);
  return h;
}

TEST(PsProtocol, AHeaderSurvivesTheWire) {
  const StepHeader h = sample_header();
  const at::Tensor words = encode_header(h);
  EXPECT_EQ(words.numel(), kHeaderWords);
  EXPECT_TRUE(same_header(decode_header(words, "worker rank 1"), h));
  StepHeader other = h;
  other.step = 42;
  EXPECT_FALSE(same_header(other, h));
}

TEST(PsProtocol, ForeignOrDamagedMessagesAreRefusedNamingTheSender) {
  at::Tensor words = encode_header(sample_header());
  words[0] = 12345;  // not our magic: another program, or another version
  try {
    decode_header(words, "worker rank 3");
    FAIL() << "accepted a message without the magic";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker rank 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("version-1"), std::string::npos) << e.what();
  }
  at::Tensor command = encode_header(sample_header());
  command[3] = 9;
  EXPECT_THROW(decode_header(command, "worker rank 0"), Error);
  at::Tensor parts = encode_header(sample_header());
  parts[8] = -1;
  EXPECT_THROW(decode_header(parts, "worker rank 0"), Error);
  EXPECT_THROW(decode_header(at::zeros({3}, at::kLong), "worker rank 0"), Error);
}

TEST(PsProtocol, FingerprintsTellSharesAndJobsApart) {
  const auto dtype = static_cast<std::int64_t>(at::kFloat);
  EXPECT_EQ(share_fingerprint({1, 2, 3}, dtype), share_fingerprint({1, 2, 3}, dtype));
  EXPECT_NE(share_fingerprint({1, 2, 3}, dtype), share_fingerprint({1, 3, 2}, dtype));
  EXPECT_NE(share_fingerprint({1, 2, 3}, dtype), share_fingerprint({1, 2}, dtype));
  EXPECT_NE(share_fingerprint({1, 2, 3}, dtype),
            share_fingerprint({1, 2, 3}, static_cast<std::int64_t>(at::kBFloat16)));
  EXPECT_NE(job_hash("a1b2"), job_hash("a1b3"));
}

TEST(PsProtocol, ServerTotalsSurviveTheWire) {
  const ServerLoad load{12, 1 << 30, 3 << 20, 0.25, 1.5, 3, 0.75};
  const ServerLoad back = decode_load(encode_load(load));
  EXPECT_EQ(back.steps, 12);
  EXPECT_EQ(back.bytes_in, 1 << 30);
  EXPECT_EQ(back.bytes_out, 3 << 20);
  EXPECT_DOUBLE_EQ(back.sum_seconds, 0.25);
  EXPECT_DOUBLE_EQ(back.active_seconds, 1.5);
  EXPECT_EQ(back.max_staleness, 3);
  EXPECT_DOUBLE_EQ(back.busy_seconds, 0.75);
}

// Requests to servers that keep the parameters carry the step's learning rate bit for bit, and
// the optimizer steps of a resumed state.
TEST(PsProtocol, APushCarriesItsLearningRateExactly) {
  StepHeader h = sample_header();
  h.command = Command::kPush;
  h.lr = 0.1 / 3;
  h.state_steps = 7;
  const StepHeader back = decode_header(encode_header(h), "worker rank 0");
  EXPECT_EQ(back.command, Command::kPush);
  EXPECT_EQ(back.lr, h.lr);
  EXPECT_EQ(back.state_steps, 7);
  at::Tensor bad = encode_header(h);
  bad[11] = -2;  // no state is -1; below that is damage
  EXPECT_THROW(decode_header(bad, "worker rank 0"), Error);
}

TEST(PsProtocol, AReplySurvivesTheWireAndDamageIsRefused) {
  const Reply reply{40, 38, 2, 1};
  const Reply back = decode_reply(encode_reply(reply), "server 1");
  EXPECT_EQ(back.applied, 40);
  EXPECT_EQ(back.optimizer_steps, 38);
  EXPECT_EQ(back.state_fields, 2);
  EXPECT_EQ(back.staleness, 1);
  EXPECT_THROW(decode_reply(encode_reply({-1, 0, 0, 0}), "server 1"), Error);
  EXPECT_THROW(decode_reply(encode_reply({1, 0, 99, 0}), "server 1"), Error);
}

}  // namespace
}  // namespace loom::parallel::ps
