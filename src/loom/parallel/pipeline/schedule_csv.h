// Schedules as CSV files, in torch.distributed.pipelining's layout: one row per rank, one cell
// per action ("0F0,0F1,0SEND_F1,..."). A file with only computations (its "compute only"
// format) gets its sends and receives added; one with communication is taken as written. The
// older zero-bubble convention of torch's files, B followed by W of the same stage and
// micro-batch, is read as I then W.
#pragma once

#include <string>

#include "loom/parallel/pipeline/schedule.h"

namespace loom::parallel::pipeline {

std::string schedule_to_csv(const Schedule& schedule);

// Reads a schedule; `name` is what errors call it (usually the file's path). The stages, their
// ranks and the micro-batch count come from the actions. Throws ConfigError naming the row and
// cell of an unreadable action, or a stage no rank computes. Does not validate().
Schedule schedule_from_csv(const std::string& text, const std::string& name);

}  // namespace loom::parallel::pipeline
