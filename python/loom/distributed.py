"""`loom.distributed`: join the job this process is one rank of.

Run a script's ranks with `loom launch --nproc-per-node N -- python3 train.py` (or torchrun,
Slurm or Open MPI, as `loom train`), and call `init()` once at the top:

    job = loom.distributed.init()
    print(job.rank, job.world, job.local_rank)

The ranks meet through Loom's rendezvous store (authenticated by the job's token) and talk over
shared memory inside a host and Gloo between hosts (`comm.backend: auto`). A process started
alone is a job of one rank.
"""

from . import _config, _loom

__all__ = ["Job", "current", "init"]

Job = _loom.Job

_job = None


def init(config=None, *, overrides=()):
    """Joins the job from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...) and
    returns it; later calls return the same job.

    Args:
        config: a `loom train` configuration (dict, YAML text or path) whose `comm:` section
            (backend, timeout_s, check_calls) and `parallel:` section say how the ranks
            exchange; None for the defaults.
        overrides: "key=value" strings on top of it, as `loom train --set`.

    Raises loom.ConfigError naming the key or variable for a bad setting, loom.TimeoutError
    naming the ranks that never came.
    """
    global _job
    if _job is None:
        _job = Job(_config.load(config, overrides))
    return _job


def current():
    """The job init() joined; raises loom.Error when init() was not called."""
    if _job is None:
        raise _loom.Error("loom.distributed: call loom.distributed.init() first")
    return _job
