// A pipeline schedule as data: for every rank, the ordered list of actions it runs in one
// optimizer step. Generators build the known schedules; a schedule can also come from a CSV file
// (schedule_csv.h). Before anything runs, validate() checks it and simulate() predicts its step
// time, bubble and memory; the runtime then executes exactly these lists.
//
// Stages: `ranks` pipeline ranks each hold `chunks` stages (interleaved schedules) laid out in a
// loop, stage s on rank s % ranks, so consecutive stages sit on consecutive ranks.
#pragma once

#include <string>
#include <vector>

#include "loom/parallel/pipeline/action.h"

namespace loom::parallel::pipeline {

struct Schedule {
  std::string name;  // gpipe | 1f1b | interleaved | zb_h1 | the CSV file it came from
  int ranks = 0;
  int stages = 0;  // ranks x chunks
  int microbatches = 0;
  std::vector<int> stage_rank;               // stage -> the rank that runs it
  std::vector<std::vector<Action>> actions;  // per rank, in order

  int chunks() const { return ranks > 0 ? stages / ranks : 0; }
  // Backward split into input (I) and weight (W) gradients, as zero-bubble schedules do.
  bool splits_backward() const;
  // All actions of one rank as text, separated by spaces (for logs and errors).
  std::string describe_rank(int rank) const;
};

// The schedule names parallel.pipeline.schedule accepts besides a CSV file.
const std::vector<std::string>& schedule_names();

// The compute actions of a known schedule, with communication added (add_communication).
// Throws ConfigError naming the parallel.pipeline key when the combination cannot work, saying
// what would: 1f1b and zb_h1 need micro-batches >= ranks and one stage per rank; interleaved
// needs micro-batches in multiples of the ranks.
Schedule make_schedule(const std::string& name, int ranks, int chunks, int microbatches);

// Adds the sends and receives a schedule of compute actions needs between stages on different
// ranks: a send right after the computation that produced it, a receive right before the
// computation that consumes it, or earlier where the peer sends other messages on the same link
// first: between two ranks, receives come in the order of the sends (validate() checks it).
// Sends do not block; receives wait for their message.
void add_communication(Schedule& schedule);

// stage -> rank for stages laid out in a loop over `ranks`.
std::vector<int> looped_stage_ranks(int ranks, int stages);

}  // namespace loom::parallel::pipeline
