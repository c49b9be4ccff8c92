#!/usr/bin/env python3
"""Synchronous parameter servers on one host against all-reduce data parallelism (issue 16's
"overhead on one host": k = n servers over shared memory should reach >= 90% of all-reduce's
samples/s).

The demo's CNN on Fashion-MNIST, n workers at a global batch of 128, run alternately R times:
`loom launch --nproc-per-node n -- loom train --set parallel.mode=data` and the same with
`--servers n` and `parallel.mode=ps`. Prints each run's samples/s and the medians' ratio, with
each mode's median step split into forward, backward and exposed exchange.

Usage: bench/ps_one_host.py [--loom build/bin/loom] [--workers 2] [--repeats 8] [--steps 200]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(loom, mode, workers, steps):
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "launch", "--nproc-per-node", str(workers)]
        if mode == "ps":
            cmd += ["--servers", str(workers)]
        cmd += ["--", loom, "train", "--out", out, "--set", "data.global_batch=128",
                "--set", f"train.max_steps={steps}", "--set", f"parallel.mode={mode}",
                "--set", "train.eval=false", "--set", "checkpoint.enabled=false",
                "--set", "train.tensorboard=false"]
        if mode == "ps":
            cmd += ["--set", f"parallel.ps.servers={workers}"]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            sys.exit(f"{mode} failed:\n{done.stdout[-3000:]}")
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    step = s["step_time"]
    ms = step["seconds_per_step"] * 1e3
    share = step["share"]
    return {"samples_per_second": s["samples_per_second"], "step_ms": ms,
            "forward_ms": share["forward"] * ms, "backward_ms": share["backward"] * ms,
            "exposed_ms": share["comm_exposed"] * ms}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loom", default="build/bin/loom")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--json")
    args = parser.parse_args()
    runs = {"data": [], "ps": []}
    for r in range(args.repeats):
        for mode in runs:
            runs[mode].append(run(args.loom, mode, args.workers, args.steps))
        print(f"round {r + 1}: all-reduce {runs['data'][-1]['samples_per_second']:.0f}/s, "
              f"servers {runs['ps'][-1]['samples_per_second']:.0f}/s", flush=True)
    medians = {mode: {key: statistics.median(x[key] for x in rs) for key in rs[0]}
               for mode, rs in runs.items()}
    for mode, name in (("data", "all-reduce"), ("ps", f"{args.workers} servers")):
        m = medians[mode]
        print(f"{name:>12}: {m['samples_per_second']:6.0f} samples/s, {m['step_ms']:.1f} ms/step "
              f"(forward {m['forward_ms']:.1f}, backward {m['backward_ms']:.1f}, exposed "
              f"exchange {m['exposed_ms']:.1f})")
    ratio = medians["ps"]["samples_per_second"] / medians["data"]["samples_per_second"]
    per_round = [p["samples_per_second"] / d["samples_per_second"]
                 for p, d in zip(runs["ps"], runs["data"])]
    print(f"servers / all-reduce: {ratio:.3f} of the samples/s (target >= 0.90); per round "
          + ", ".join(f"{x:.2f}" for x in per_round))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workers": args.workers, "runs": runs, "medians": medians,
                       "ratio": ratio}, f, indent=2)


if __name__ == "__main__":
    main()
