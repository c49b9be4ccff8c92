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
  // `pipeline` holds this rank's pipeline (not owned; it must outlive the piece); `held` names
  // the tensors of this rank's stages (parameters, tied copies and buffers).
  PipelineStages(comm::Communicator& pipeline, std::set<std::string> held)
      : pipeline_(pipeline), held_(std::move(held)) {}

  std::optional<CheckpointTensors> gather(CheckpointTensors mine) override;
  // Of a checkpoint's tensors, those of this rank's stages (their optimizer state
  // "<param>.<field>" too).
  NamedTensors own_model_state(NamedTensors whole) const override;

 private:
  comm::Communicator& pipeline_;
  std::set<std::string> held_;
};

}  // namespace loom::parallel::pipeline
