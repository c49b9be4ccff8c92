"""loom.train() and loom.plan(): the trainer and the cost planner, called from Python."""

import json
import os

from . import _config, _loom


def train(config=None, overrides=(), *, out, resume=False):
    """Trains as `loom train --out OUT [--set ...]` does, in this process, and returns the
    run's summary (what it writes to OUT/summary.json) as a dict.

    Args:
        config: a dict, YAML text or a path (None: the built-in default, the small CNN on
            Fashion-MNIST).
        overrides: "key=value" strings, as `--set`.
        out: the run directory (metrics, checkpoints, summary).
        resume: continue from the last checkpoint in `out`.

    Training sets the process's LibTorch threads and CPU allocator as `loom train` does
    (runtime.threads, runtime.allocator). Ctrl-C stops it after the current step with
    KeyboardInterrupt. Raises loom.ConfigError, loom.DataError or loom.Error as `loom train`
    exits 2 or 1, with the same messages.
    """
    text = _loom.train(_config.load(config, overrides), os.fspath(out), bool(resume))
    return json.loads(text)


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
