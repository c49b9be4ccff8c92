#!/usr/bin/env python3
"""What the always-on step accounting costs: the demo's CNN on Fashion-MNIST (the shortest steps
Loom has, so the largest relative cost) with the accounting on and off
(LOOM_STEP_ACCOUNTING=0 keeps only each step's wall time), interleaved R times; medians of
steady-state samples/s and their ratio. Target: the accounting costs <= 1% of step time.

Usage: bench/accounting_overhead.py [--loom build/bin/loom] [--repeats 5] [--steps 600]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(loom, steps, on):
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, LOOM_STEP_ACCOUNTING="1" if on else "0")
        subprocess.run([loom, "train", "--out", out, "--set", f"train.max_steps={steps}",
                        "--set", "train.eval=false", "--set", "checkpoint.enabled=false",
                        "--set", "train.tensorboard=false"],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    return s["samples_per_second"], s["step_time"]["seconds_per_step"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=600)
    a = p.parse_args()
    on, off, step = [], [], []
    for _ in range(a.repeats):
        rate, seconds = run(a.loom, a.steps, True)
        on.append(rate)
        step.append(seconds)
        off.append(run(a.loom, a.steps, False)[0])
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"demo CNN, {a.steps} steps, medians of {a.repeats} interleaved runs; "
          f"step {1e3 * statistics.median(step):.2f} ms")
    print(f"  accounting on : {m_on:8.1f} samples/s   runs: {', '.join(f'{x:.0f}' for x in on)}")
    print(f"  accounting off: {m_off:8.1f} samples/s   runs: {', '.join(f'{x:.0f}' for x in off)}")
    print(f"  cost: {100 * (m_off / m_on - 1):+.2f}% of step time (target <= 1%)")


if __name__ == "__main__":
    sys.exit(main())
