// Pipeline schedules as data: every generator's plans are valid and deadlock-free (or refused
// with the reason), the simulator reproduces the textbook bubble and memory figures, the
// validator names the first broken rule, and CSV files round-trip.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/parallel/pipeline/schedule.h"
#include "loom/parallel/pipeline/schedule_csv.h"
#include "loom/parallel/pipeline/simulator.h"
#include "loom/parallel/pipeline/validator.h"

namespace loom::parallel::pipeline {
namespace {

using Kind = ActionKind;

// Costs per stage: forward 1, input gradient 1, weight gradient 1 (so B = 2), free transfers.
std::vector<StageCosts> costs(int stages, double scale = 1.0) {
  return uniform_costs(stages, scale);
}

int count(const Schedule& s, int stage, Kind kind) {
  int n = 0;
  for (const auto& list : s.actions) {
    for (const Action& a : list) n += a.stage == stage && a.kind == kind;
  }
  return n;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineAction, TextFormRoundTrips) {
  for (const std::string text : {"0F1", "12SEND_F3", "1RECV_B0", "2I3", "0W3", "3B10", "1RECV_F2",
                                 "4SEND_B0"}) {
    EXPECT_EQ(to_string(parse_action(text)), text);
  }
  EXPECT_EQ(parse_action("2I3").kind, Kind::kBackwardInput);
  EXPECT_EQ(parse_action("12SEND_F3").stage, 12);
  for (const std::string bad : {"F1", "0X1", "0F", "0F1x", "", "0SEND1"}) {
    EXPECT_THROW(parse_action(bad), ConfigError) << bad;
  }
}

// The matrix of the issue: each generator x P in {2,3,4} x M in {1, P-1, P, 2P+1} x chunks in
// {1,2}. A plan that is made must validate and finish in the dry run with every micro-batch's
// F and backward once per stage; one that is refused must say why with the key to change.
TEST(PipelineSchedule, EveryGeneratorMakesValidPlansOrRefusesWithTheReason) {
  int made = 0, refused = 0;
  for (const std::string& name : schedule_names()) {
    for (int p : {2, 3, 4}) {
      for (int m : {1, p - 1, p, 2 * p + 1}) {
        for (int chunks : {1, 2}) {
          const std::string where = name + " P=" + std::to_string(p) + " M=" +
                                    std::to_string(m) + " chunks=" + std::to_string(chunks);
          Schedule s;
          try {
            s = make_schedule(name, p, chunks, m);
          } catch (const ConfigError& e) {
            ++refused;
            const std::string why = e.what();
            EXPECT_NE(why.find("parallel.pipeline."), std::string::npos) << where << ": " << why;
            EXPECT_NE(why.find("use "), std::string::npos) << where << ": " << why;
            // The documented refusals, and only those.
            const bool one_chunk = name == "1f1b" || name == "zb_h1";
            const bool expected = (one_chunk && (chunks != 1 || m < p)) ||
                                  (name == "interleaved" && m % p != 0);
            EXPECT_TRUE(expected) << where << " was refused: " << why;
            continue;
          }
          ++made;
          EXPECT_NO_THROW(validate(s)) << where;
          const Simulation sim = simulate(s, costs(s.stages));
          EXPECT_FALSE(sim.deadlocked) << where << ": " << sim.deadlock;
          for (int stage = 0; stage < s.stages; ++stage) {
            EXPECT_EQ(count(s, stage, Kind::kForward), m) << where;
            EXPECT_EQ(count(s, stage, Kind::kBackward) + count(s, stage, Kind::kBackwardInput), m)
                << where;
          }
        }
      }
    }
  }
  EXPECT_GT(made, 40);
  EXPECT_GT(refused, 10);
}

// GPipe and 1F1B: bubble (P-1)/(M+P-1); peak activations M for GPipe, min(P-s, M) for 1F1B.
TEST(PipelineSimulator, MatchesTheTextbookBubbleAndMemory) {
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p + 1, 8}) {
      for (const std::string name : {"gpipe", "1f1b"}) {
        const Schedule s = make_schedule(name, p, 1, m);
        const Simulation sim = simulate(s, costs(p));
        const double expected = double(p - 1) / double(m + p - 1);
        EXPECT_NEAR(sim.bubble_fraction, expected, 1e-9) << name << " P=" << p << " M=" << m;
        EXPECT_NEAR(sim.step_seconds, (m + p - 1) * 3.0, 1e-9) << name;
        for (int stage = 0; stage < p; ++stage) {
          const int held = name == "gpipe" ? m : std::min(p - stage, m);
          EXPECT_EQ(sim.peak_in_flight[static_cast<size_t>(stage)], held)
              << name << " stage " << stage;
        }
      }
    }
  }
}

TEST(PipelineSimulator, InterleavingAndZeroBubbleShrinkTheBubble) {
  const int p = 4, m = 8;
  const Simulation one = simulate(make_schedule("1f1b", p, 1, m), costs(p));
  // Two chunks per rank, each half of a stage's work.
  const Simulation two = simulate(make_schedule("interleaved", p, 2, m), costs(2 * p, 0.5));
  const Simulation zb = simulate(make_schedule("zb_h1", p, 1, m), costs(p));
  EXPECT_LT(two.bubble_fraction, 0.75 * one.bubble_fraction);
  EXPECT_LT(zb.bubble_fraction, 0.75 * one.bubble_fraction);
  // ZB-H1's step with F = I = W: M(F+I+W) + (P-1)(F+I-W) = 24 + 3, against 1F1B's 24 + 9.
  EXPECT_NEAR(zb.step_seconds, 27.0, 1e-9);
  EXPECT_NEAR(one.step_seconds, 33.0, 1e-9);
  EXPECT_EQ(zb.peak_in_flight, one.peak_in_flight);  // ZB-H1 keeps 1F1B's memory
}

TEST(PipelineSimulator, TransfersDelayTheReceiver) {
  std::vector<StageCosts> c = costs(2);
  c[0].send_seconds = c[1].send_seconds = 0.5;
  const Simulation sim = simulate(make_schedule("gpipe", 2, 1, 1), c);
  // F0 (1) -> transfer (0.5) -> F1 + B1 (3) -> transfer (0.5) -> B0 (2).
  EXPECT_NEAR(sim.step_seconds, 7.0, 1e-9);
}

Schedule two_rank(const std::vector<std::vector<std::string>>& rows) {
  Schedule s;
  s.name = "test";
  s.ranks = static_cast<int>(rows.size());
  s.stages = 2;
  s.microbatches = 1;
  s.stage_rank = {0, 1};
  for (const auto& row : rows) {
    std::vector<Action> list;
    for (const auto& text : row) list.push_back(parse_action(text));
    s.actions.push_back(list);
  }
  return s;
}

TEST(PipelineValidator, NamesTheFirstBrokenRule) {
  const std::vector<std::string> good0 = {"0F0", "0SEND_F0", "0RECV_B0", "0B0"};
  const std::vector<std::string> good1 = {"1RECV_F0", "1F0", "1B0", "1SEND_B0"};
  EXPECT_NO_THROW(validate(two_rank({good0, good1})));
  struct Case {
    std::vector<std::vector<std::string>> rows;
    std::string message;
  };
  for (const auto& c : std::vector<Case>{
           {{{"0F0", "0F0", "0SEND_F0", "0RECV_B0", "0B0"}, good1}, "forward runs twice"},
           {{{"0B0", "0F0", "0SEND_F0", "0RECV_B0"}, good1}, "backward before forward"},
           {{good0, {"1F0", "1RECV_F0", "1B0", "1SEND_B0"}}, "before receiving its input"},
           {{{"0F0", "0SEND_F0", "0RECV_B0", "0W0", "0I0"}, good1}, "(W) before the input"},
           {{good0, {"1RECV_F0", "1F0", "1B0", "1SEND_B0", "0F0"}}, "stage 0 runs on rank 0"},
           {{{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}, {"1RECV_F0", "1F0", "1B0"}},
            "1SEND_B0"},
           {{{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}, {"1RECV_F0", "1F0"}}, "has no backward"},
           {{{"0F0", "0RECV_B0", "0SEND_F0", "0B0"}, good1}, "deadlocks: rank 0 waits at 0RECV_B0"},
           {{{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}, {"1RECV_F0", "1F1", "1B0", "1SEND_B0"}},
            "micro-batch 1 does not exist"},
       }) {
    const std::string why = error_of([&] { validate(two_rank(c.rows)); });
    EXPECT_NE(why.find(c.message), std::string::npos) << "expected '" << c.message << "', got '"
                                                      << why << "'";
  }
}

TEST(PipelineCsv, RoundTripsEveryGeneratedSchedule) {
  for (const std::string& name : schedule_names()) {
    const Schedule s = make_schedule(name, 3, name == "interleaved" ? 2 : 1, 6);
    const std::string csv = schedule_to_csv(s);
    const Schedule back = schedule_from_csv(csv, "file.csv");
    EXPECT_EQ(schedule_to_csv(back), csv) << name;
    EXPECT_EQ(back.stage_rank, s.stage_rank) << name;
    EXPECT_EQ(back.microbatches, s.microbatches) << name;
    EXPECT_NO_THROW(validate(back)) << name;
  }
}

TEST(PipelineCsv, ComputeOnlyFilesGetTheirCommunication) {
  // torch.distributed.pipelining's "compute only" layout; empty cells are idle slots.
  const Schedule s = schedule_from_csv("0F0,0F1,,0B0,0B1\n1F0,1B0,1F1,1B1\n", "mine.csv");
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.microbatches, 2);
  EXPECT_EQ(s.describe_rank(1), "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1");
  EXPECT_NO_THROW(validate(s));
  const std::string why = error_of([] { schedule_from_csv("0F0,0Q1\n", "bad.csv"); });
  EXPECT_NE(why.find("'bad.csv', row 1 (rank 0), cell 2"), std::string::npos) << why;
}

// torch.distributed.pipelining's older zero-bubble files (ZB-H1 written before it named I) put B
// where the input gradient alone is meant, and W of the same micro-batch after it: read as I.
TEST(PipelineCsv, OlderZeroBubbleFilesWriteBForTheInputGradient) {
  const Schedule s = schedule_from_csv(
      "0F0,0F1,,0B0,0W0,0B1,0W1\n"
      ",1F0,1B0,1W0,1F1,1B1,1W1\n",
      "zb_old.csv");
  EXPECT_EQ(s.describe_rank(0),
            "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0I0 0W0 0RECV_B1 0I1 0W1");
  EXPECT_EQ(s.describe_rank(1),
            "1RECV_F0 1F0 1I0 1SEND_B0 1W0 1RECV_F1 1F1 1I1 1SEND_B1 1W1");
  EXPECT_NO_THROW(validate(s));
  // A B with no W of its micro-batch after it stays a full backward.
  const Schedule mixed = schedule_from_csv("0F0,0F1,0B0,0B1,0W1\n", "mixed.csv");
  EXPECT_EQ(mixed.describe_rank(0), "0F0 0F1 0B0 0I1 0W1");
  EXPECT_NO_THROW(validate(mixed));
}

}  // namespace
}  // namespace loom::parallel::pipeline
