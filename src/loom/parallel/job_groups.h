// The groups of a job's ranks that a run's layout is made over, as the job entry (train/job.h's
// Job::fill) hands them to a training run, which passes them on without looking inside.
#pragma once

#include "loom/comm/communicator.h"
#include "loom/comm/group_maker.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"

namespace loom::parallel {

struct JobGroups {
  // The ranks that train, when there are more than one (not owned; null for one process): data
  // parallel replicas (with their ZeRO stage), a pipeline's P x D ranks, a tensor group's T x
  // ..., or a parameter-server job's workers (ps_world holds them all).
  comm::Communicator* trainers = nullptr;
  // Builds the groups of the mesh's dimensions among them (null for one process).
  comm::MakeGroup make_group;
  // Parameter servers (parallel.mode: ps): the whole job, workers then servers, over which
  // gradient parts travel (not owned), and who is who.
  comm::Communicator* ps_world = nullptr;
  ps::PsExchangeOptions ps;
};

}  // namespace loom::parallel
