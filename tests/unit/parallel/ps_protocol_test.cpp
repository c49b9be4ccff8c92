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
  const ServerLoad load{12, 1 << 30, 3 << 20, 0.25, 1.5};
  const ServerLoad back = decode_load(encode_load(load));
  EXPECT_EQ(back.steps, 12);
  EXPECT_EQ(back.bytes_in, 1 << 30);
  EXPECT_EQ(back.bytes_out, 3 << 20);
  EXPECT_DOUBLE_EQ(back.sum_seconds, 0.25);
  EXPECT_DOUBLE_EQ(back.active_seconds, 1.5);
}

}  // namespace
}  // namespace loom::parallel::ps
