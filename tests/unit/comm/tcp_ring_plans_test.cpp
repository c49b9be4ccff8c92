// The tcp backend's ring algorithms, run in memory: every rank's plan is carried out against the
// byte stream its previous rank's plan sends, with no sockets, so that the plans themselves are
// checked (each byte received where it belongs, sums right on every rank, no rank waiting for a
// chunk that is never sent) for every ring size and odd sizes, in tiny chunks (deep pipelines).
#include "loom/comm/tcp_ring_plans.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <deque>

#include "loom/comm/float_widening.h"
#include "loom/comm/reduce_kernels.h"
#include "loom/core/error.h"

namespace loom::comm {
namespace {

using OnReceive = TransferPlan::OnReceive;

// Carries out every rank's plan; rank r's sends are what rank r+1 receives. Fails the test if a
// rank still waits for bytes when nobody can send any more, or bytes are left unread.
void run_in_memory(const std::vector<TransferPlan>& plans) {
  const int world = static_cast<int>(plans.size());
  std::vector<std::deque<char>> streams(world);  // sent by rank r, not yet read by rank r+1
  std::vector<std::size_t> sent(world, 0), received(world, 0);
  std::vector<std::vector<char>> scratch(world);
  for (int r = 0; r < world; ++r) scratch[r].resize(plans[r].scratch_bytes());
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < world; ++r) {
      const TransferPlan& plan = plans[r];
      while (sent[r] < plan.sends.size() && plan.sends[sent[r]].after <= received[r]) {
        const auto& s = plan.sends[sent[r]++];
        streams[r].insert(streams[r].end(), s.data, s.data + s.bytes);
        moved = true;
      }
      auto& in = streams[(r + world - 1) % world];
      while (received[r] < plan.receives.size() && in.size() >= plan.receives[received[r]].bytes) {
        const auto& segment = plan.receives[received[r]++];
        char* into = segment.action == OnReceive::kReduce ? scratch[r].data() : segment.data;
        std::copy(in.begin(), in.begin() + segment.bytes, into);
        in.erase(in.begin(), in.begin() + segment.bytes);
        if (segment.action == OnReceive::kReduce) {
          const bool widened = segment.widened(plan.dtype);
          const std::size_t elements =
              segment.bytes / c10::elementSize(widened ? segment.arrives_as : plan.dtype);
          const void* inputs[2] = {into, segment.local};
          std::vector<float> wide(widened ? elements : 0);
          if (widened) {
            widen_to_float(segment.arrives_as, into, wide.data(), elements);
            inputs[0] = wide.data();
          }
          reduce_sum(plan.dtype, segment.out, inputs, 2, elements, segment.scale);
        } else if (segment.action == OnReceive::kCheckHeader) {
          const auto theirs = tcp_protocol::decode_header(into);
          if (!theirs || !tcp_protocol::same_call(*theirs, plan.header)) {
            throw CommError("rank " + std::to_string(r) + ": calls out of step");
          }
        }
        moved = true;
      }
    }
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(sent[r], plans[r].sends.size()) << "rank " << r << " could not send everything";
    EXPECT_EQ(received[r], plans[r].receives.size()) << "rank " << r << " waits for bytes";
    EXPECT_TRUE(streams[r].empty()) << "rank " << r << " sent bytes nobody read";
  }
}

at::Tensor values(std::int64_t n, int rank) {
  return ((at::arange(n, at::kLong) * 7 + rank * 13) % 101).to(at::kFloat) * 0.25 - 12.0;
}

tcp_protocol::CallHeader call(tcp_protocol::CallKind kind, std::int64_t numel, int root = 0) {
  tcp_protocol::CallHeader header;
  header.kind = kind;
  header.sequence = 1;
  header.dtype = static_cast<std::int32_t>(at::kFloat);
  header.numel = numel;
  header.root = root;
  return header;
}

char* bytes_of(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

constexpr std::size_t kTinyChunks = 12;  // 3 floats: many chunks per block

class RingPlans : public ::testing::TestWithParam<int> {};

TEST_P(RingPlans, ReduceScatterThenAllGatherSumsOnEveryRank) {
  const int world = GetParam();
  for (std::int64_t n : {0, 1, 5, 7, 1000}) {
    SCOPED_TRACE("world " + std::to_string(world) + ", " + std::to_string(n) + " floats");
    std::vector<at::Tensor> data;
    auto sum = at::zeros({n});
    for (int r = 0; r < world; ++r) {
      data.push_back(values(n, r));
      sum += values(n, r);
    }
    const RingBlocks blocks = even_blocks(n, world);
    std::vector<TransferPlan> plans;
    for (int r = 0; r < world; ++r) {
      plans.push_back(ring_reduce_scatter(
          bytes_of(data[r]), blocks, at::kFloat, 1.0 / world, {r, world, kTinyChunks},
          call(tcp_protocol::CallKind::kAllreduce, n), WithHeader::kYes));
    }
    run_in_memory(plans);
    for (int r = 0; r < world; ++r) {
      const auto own = data[r].narrow(0, blocks.offset[r], blocks.count[r]);
      EXPECT_TRUE(at::allclose(own, (sum / world).narrow(0, blocks.offset[r], blocks.count[r])))
          << "rank " << r << "'s block";
    }
    plans.clear();
    for (int r = 0; r < world; ++r) {
      plans.push_back(ring_allgather(bytes_of(data[r]), nullptr, blocks, sizeof(float),
                                     {r, world, kTinyChunks},
                                     call(tcp_protocol::CallKind::kAllreduce, n), WithHeader::kNo));
    }
    run_in_memory(plans);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(at::allclose(data[r], sum / world)) << "rank " << r;
      EXPECT_TRUE(data[r].equal(data[0])) << "rank " << r << " holds other bits than rank 0";
    }
  }
}

// bfloat16 summed in float: each rank's own parts travel in 16 bits at the first step, partial
// sums in float after; a block is rounded once, by the rank that completes it.
TEST_P(RingPlans, WidenedReduceScatterSendsPartsNarrowAndRoundsOnce) {
  const int world = GetParam();
  const std::int64_t n = 1003;
  std::vector<at::Tensor> narrow, wide;
  auto sum = at::zeros({n});
  for (int r = 0; r < world; ++r) {
    narrow.push_back((values(n, r) * 1.37).to(at::kBFloat16));
    wide.push_back(narrow[r].to(at::kFloat));
    sum += wide[r];
  }
  const RingBlocks blocks = even_blocks(n, world);
  std::vector<TransferPlan> plans;
  for (int r = 0; r < world; ++r) {
    plans.push_back(ring_reduce_scatter_widened(
        bytes_of(wide[r]), bytes_of(narrow[r]), at::kBFloat16, blocks, 1.0, {r, world, 64},
        call(tcp_protocol::CallKind::kAllreduce, n), WithHeader::kYes));
  }
  std::size_t narrow_bytes = 0;
  for (const auto& send : plans[0].sends) narrow_bytes += send.bytes;
  run_in_memory(plans);
  for (int r = 0; r < world; ++r) {
    const auto own = wide[r].narrow(0, blocks.offset[r], blocks.count[r]);
    const auto want = sum.narrow(0, blocks.offset[r], blocks.count[r]);
    EXPECT_TRUE(at::allclose(own, want, 1e-5, 1e-4)) << "rank " << r;
    EXPECT_TRUE(own.to(at::kBFloat16).equal(want.to(at::kBFloat16))) << "rank " << r;
  }
  if (world == 2) {  // one step: the parts only, 16 bits each (and the header)
    EXPECT_EQ(narrow_bytes, tcp_protocol::kHeaderBytes + blocks.count[1] * 2);
  }
}

TEST_P(RingPlans, AllGatherPutsEveryBlockInRankOrder) {
  const int world = GetParam();
  const std::int64_t n = 11;
  std::vector<at::Tensor> inputs, outputs;
  std::vector<TransferPlan> plans;
  for (int r = 0; r < world; ++r) {
    inputs.push_back(values(n, r));
    outputs.push_back(at::zeros({world * n}));
    outputs[r].narrow(0, r * n, n).copy_(inputs[r]);
  }
  for (int r = 0; r < world; ++r) {
    plans.push_back(ring_allgather(bytes_of(outputs[r]), bytes_of(inputs[r]),
                                   equal_blocks(n, world), sizeof(float), {r, world, kTinyChunks},
                                   call(tcp_protocol::CallKind::kAllgather, n), WithHeader::kYes));
  }
  run_in_memory(plans);
  for (int r = 0; r < world; ++r) {
    for (int q = 0; q < world; ++q) {
      EXPECT_TRUE(outputs[r].narrow(0, q * n, n).equal(inputs[q]))
          << "rank " << r << ", block " << q;
    }
  }
}

TEST_P(RingPlans, BroadcastReachesEveryRankFromEveryRoot) {
  const int world = GetParam();
  for (int root = 0; root < world; ++root) {
    std::vector<at::Tensor> data;
    std::vector<TransferPlan> plans;
    for (int r = 0; r < world; ++r) data.push_back(values(37, r));
    for (int r = 0; r < world; ++r) {
      plans.push_back(ring_broadcast(bytes_of(data[r]), data[r].nbytes(), root,
                                     {r, world, kTinyChunks},
                                     call(tcp_protocol::CallKind::kBroadcast, 37, root)));
    }
    run_in_memory(plans);
    for (int r = 0; r < world; ++r) EXPECT_TRUE(data[r].equal(values(37, root))) << root << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RingPlans, ::testing::Values(1, 2, 3, 4, 5));

TEST(RingPlans, ACallOutOfStepIsCaughtByTheHeader) {
  std::vector<at::Tensor> data = {values(8, 0), values(8, 1)};
  std::vector<TransferPlan> plans;
  for (int r = 0; r < 2; ++r) {
    plans.push_back(ring_broadcast(bytes_of(data[r]), data[r].nbytes(), 0, {r, 2, 4096},
                                   call(tcp_protocol::CallKind::kBroadcast, r == 0 ? 8 : 9)));
  }
  EXPECT_THROW(run_in_memory(plans), CommError);
}

TEST(RingPlans, BlocksCoverEveryElementOnce) {
  for (std::size_t n : {0u, 1u, 5u, 6u, 1001u}) {
    for (int parts : {1, 2, 3, 7}) {
      const RingBlocks blocks = even_blocks(n, parts);
      std::size_t next = 0, longest = 0, shortest = n;
      for (int b = 0; b < parts; ++b) {
        EXPECT_EQ(blocks.offset[b], next);
        next += blocks.count[b];
        longest = std::max(longest, blocks.count[b]);
        shortest = std::min(shortest, blocks.count[b]);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(longest - shortest, 1u);
    }
  }
}

}  // namespace
}  // namespace loom::comm
