#!/usr/bin/env python3
"""What loom.profile.Steps costs a Python training loop: examples/python/train_fashion_mnist.py's
loop (its CNN on Fashion-MNIST, batch 64, loom.data.Loader with one thread, one compute thread)
with Steps accounting it (hooks on the model and optimizer, metrics.jsonl, TensorBoard events,
summary.json) and without, in alternating chunks of one process (bench/peers/steps_loop.py);
the median over R processes of their accounted/plain ratio. Target: >= 0.97.

Usage: bench/python_steps_overhead.py [--build build] [--repeats 5] [--chunks 8]
       [--chunk-steps 30] [--json FILE]
"""
import sys
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable  # the project's .venv: Loom's torch, the peers' torch


def run_once(build, chunks, chunk_steps):
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(build), "python"),
           "LOOM_LOG_LEVEL": "warn"}
    command = [PYTHON, os.path.join(HERE, "peers", "steps_loop.py"), "--chunks", str(chunks),
               "--chunk-steps", str(chunk_steps)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-steps", type=int, default=30)
    p.add_argument("--json")
    a = p.parse_args()
    runs = [run_once(a.build, a.chunks, a.chunk_steps) for _ in range(a.repeats)]
    ratios = [r["steps_samples_per_second"] / r["plain_samples_per_second"] for r in runs]
    result = {"plain_samples_per_second": statistics.median(
                  r["plain_samples_per_second"] for r in runs),
              "steps_samples_per_second": statistics.median(
                  r["steps_samples_per_second"] for r in runs),
              "ratio": statistics.median(ratios), "ratios": ratios,
              "open_and_close_seconds": statistics.median(
                  r["open_and_close_seconds"] for r in runs)}
    print(f"plain loop:        {result['plain_samples_per_second']:.0f} samples/s")
    print(f"loop with Steps:   {result['steps_samples_per_second']:.0f} samples/s")
    print(f"ratio {result['ratio']:.3f} (median of {a.repeats} processes: "
          + ", ".join(f"{r:.3f}" for r in ratios) + "; target >= 0.97)")
    print(f"Steps() + close(): {1e3 * result['open_and_close_seconds']:.1f} ms once per run")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
