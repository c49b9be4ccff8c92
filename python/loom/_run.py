"""loom.train() and loom.plan(): the trainer and the cost planner, called from Python."""

import json
import os

from . import _config, _loom, distributed


def train(config=None, overrides=(), *, out, resume=False):
    """Trains as `loom train --out OUT [--set ...]` does, in this process, and returns the
    run's summary (what it writes to OUT/summary.json) as a dict.

    Started as one rank of a job (`loom launch --nproc-per-node N -- python3 train.py`,
    torchrun, Slurm or Open MPI), every rank calls it with the same configuration and `out`, and
    they train as one job laid out as the configuration says, exactly as `loom train` under
    `loom launch` does: data parallel, a pipeline's stages, or workers and parameter servers. The
    job is joined through loom.distributed.init() (the one that init() joined before, if it did:
    its layout must be the configuration's); on a parameter server it serves until the workers
    are done and ends the process (exit status 0). Rank 0 writes the run directory and returns
    the summary; the other ranks write nothing there and return None.

    Args:
        config: a dict, YAML text or a path (None: the built-in default, the small CNN on
            Fashion-MNIST; resuming, OUT/config.yaml, the run's own).
        overrides: "key=value" strings, as `--set`.
        out: the run directory (metrics, checkpoints, summary).
        resume: continue from the last checkpoint in `out`.

    Training sets the process's LibTorch threads and CPU allocator as `loom train` does
    (runtime.threads, runtime.allocator). Ctrl-C stops it after the current step with
    KeyboardInterrupt. Raises loom.ConfigError, loom.DataError or loom.Error as `loom train`
    exits 2 or 1, with the same messages.
    """
    own = os.path.join(os.fspath(out), "config.yaml")
    if config is None and resume and os.path.isfile(own):
        # As `loom train --out OUT --resume` without a file: the run's own configuration, the
        # overrides over it (not the defaults, which the checkpoint was not trained with).
        config = own
    config = _config.load(config, overrides)
    job = distributed.init(config, out_dir=os.fspath(out))
    text = _loom.train(config, os.fspath(out), bool(resume), job)
    return None if text is None else json.loads(text)


def plan(run_dir, prices, *, samples=1e9, trainer="", worker=""):
    """What `loom plan RUN_DIR --prices PRICES` computes, as a dict.

    Args:
        run_dir: a `loom train` run directory (its summary.json).
        prices: a price list file (YAML; see examples/prices.yaml).
        samples: samples to train, for time and cost.
        trainer, worker: the instance types of the CPU-preprocessing what-if ("" picks them).

    Returns {"run": the run's measurement, "instances": per instance type its samples/s,
    samples per dollar, hours and cost (samples_per_second None when it cannot be estimated,
    with the reason in "basis"), "trainer", "worker", "what_if": None or the throughput, price
    and samples per dollar for k = 0 ... CPU instances in "rows", with "break_even" and
    "best_value"}.
    """
    return _loom.plan_costs(os.fspath(run_dir), os.fspath(prices), float(samples), trainer,
                            worker)
