// The pipeline dimension's piece of a checkpoint (layout_piece.h): each rank holds its own
// stages' tensors; a checkpoint gathers every stage's on the pipeline's first rank, where the
// other ranks' come as tensors to fetch, one at a time as the writer reaches them (each rank
// sends all of its stages' at once, and each send completes as the first rank takes it in). A
// tied parameter comes from its owner and from each copy, equal: the first is written.
//
// Threading: the training loop's; gather() is collective over the pipeline's ranks.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "loom/comm/communicator.h"
#include "loom/parallel/layout_piece.h"

namespace loom::parallel::pipeline {

class PipelineStages : public LayoutPiece {
 public:
  // `pipeline` holds this rank's pipeline (not owned; it must outlive the piece), whose rank
  // `last_stage` runs the stage that makes the outputs; `held` names the tensors of this rank's
  // stages (parameters, tied copies and buffers), `tied_copies` those of its parameters another
  // stage owns.
  PipelineStages(comm::Communicator& pipeline, int last_stage, std::set<std::string> held,
                 std::set<std::string> tied_copies)
      : pipeline_(pipeline),
        last_stage_(last_stage),
        held_(std::move(held)),
        tied_copies_(std::move(tied_copies)) {}

  // The last stage saw every output of its pipeline's share: its sums go to the other stages.
  at::Tensor combine_eval_sums(at::Tensor sums) override {
    if (pipeline_.world() > 1) {
      pipeline_.broadcast(sums, last_stage_)->wait(pipeline_.options().timeout);
    }
    return sums;
  }

  Placement placement(const std::string& name) const override {
    return {tied_copies_.count(name) ? Placement::Kind::kTiedCopy : Placement::Kind::kStage, {}};
  }
  int coordinate() const override { return pipeline_.rank(); }

  std::optional<CheckpointTensors> gather(CheckpointTensors mine) override;
  // Of a checkpoint's tensors, those of this rank's stages (their optimizer state
  // "<param>.<field>" too).
  NamedTensors own_model_state(NamedTensors whole) const override;

 private:
  comm::Communicator& pipeline_;
  int last_stage_;
  std::set<std::string> held_, tied_copies_;
};

}  // namespace loom::parallel::pipeline
