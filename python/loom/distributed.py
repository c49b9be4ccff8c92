"""`loom.distributed`: join the job this process is one rank of.

Run a script's ranks with `loom launch --nproc-per-node N -- python3 train.py` (or torchrun,
Slurm or Open MPI, as `loom train`), and call `init()` once at the top:

    job = loom.distributed.init()
    print(job.rank, job.world, job.local_rank, job.trainers)
    print(job.layout)            # "data parallel over 2 ranks: the script's own batch"
    print(job.layout.mesh)       # {"data": 2}: the training ranks' dimensions

A loop that should survive preemption and restarts asks after every step:

    job = loom.distributed.init(preemptible=True)
    start = loom.checkpoint.load(...)["step"] if resuming else 0   # `loom launch --max-restarts`
    for step in range(start, steps):
        ...
        if job.should_stop(step + 1):          # any rank got SIGTERM: all stop at this step
            loom.checkpoint.save(..., step + 1, ...)
            raise SystemExit(loom.PREEMPTED)

The ranks meet through Loom's rendezvous store (authenticated by the job's token) and talk over
shared memory inside a host and TCP between hosts (`comm.backend: auto`). A process started
alone is a job of one rank.
"""

from . import _config, _loom

__all__ = ["Job", "Layout", "barrier", "current", "init", "is_initialized"]

# The job this process is a rank of, as init() returns it (made by init() only): `rank`,
# `world`, `local_rank`, `local_world`, `trainers` (the ranks that train: `world` less the
# parameter servers), `layout`, `backend`, `attempt`, should_stop(step) and barrier().
Job = _loom.Job
# How the job lays its ranks out and what one step is: `world`, `trainers`, `mesh` (the
# training ranks' named dimensions, outermost first: {"data": 2, "pipeline": 2}), `replicas`,
# `servers`, `pipeline_ranks`, `zero_stage`, the step's `global_batch`, `replica_batch`,
# `micro_batch` and `micro_batches`, `lr_scale`; str() says it in words.
Layout = _loom.Layout

_job = None


def init(config=None, *, overrides=(), out_dir="", preemptible=False):
    """Joins the job from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...) and
    returns it; later calls return the same job.

    Under `loom launch --servers K` the job's last K ranks are parameter servers: on those,
    init() serves until every worker is done (through SIGTERM too: preempted workers commit a
    checkpoint that needs the servers' state) and then ends the process (exit status 0), so the
    rest of the script runs on the workers only. loom.train() joins through here too.

    Args:
        config: a `loom train` configuration (dict, YAML text or path) whose `comm:` section
            (backend, timeout_s, check_calls) and `parallel:` section (`parallel.ps.mode`:
            sync, async or ssp, `parallel.ps.staleness`, `parallel.ps.part_mb`) say how the
            ranks exchange; None for the defaults.
        overrides: "key=value" strings on top of it, as `loom train --set`.
        out_dir: where a server writes its trace spans (with profile.trace).
        preemptible: catch SIGTERM (spot preemption, `loom launch` passing one on) as a request
            to stop rather than an ending: `job.should_stop(step)` after each step then says
            when every rank should commit a checkpoint and exit with loom.PREEMPTED (75), as
            `loom train` does. Off, SIGTERM ends the process as usual.

    Raises loom.ConfigError naming the key or variable for a bad setting, loom.TimeoutError
    naming the ranks that never came.
    """
    global _job
    if _job is None:
        job = _loom.enter_job(_config.load(config, overrides), str(out_dir), bool(preemptible))
        if job is None:  # a parameter server, whose workers are done
            raise SystemExit(0)
        _job = job
    return _job


def is_initialized():
    """Whether init() has joined this process's job."""
    return _job is not None


def barrier():
    """Returns once every training rank of the job has called it (as torch.distributed's
    barrier; at most comm.timeout_s, then loom.TimeoutError naming the ranks that never came).
    Raises loom.Error when init() was not called."""
    current().barrier()


def current():
    """The job init() joined; raises loom.Error when init() was not called."""
    if _job is None:
        raise _loom.Error("loom.distributed: call loom.distributed.init() first")
    return _job
