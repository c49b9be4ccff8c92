#!/usr/bin/env python3
"""Data parallelism, measured four ways in one run, interleaved R times (medians):

  one      loom train, 1 rank x 2 threads, batch 64                      (the scaling baseline)
  loom-dp  loom launch --nproc-per-node 2 -- loom train, 2 ranks x 1 thread, global batch 64
  ddp      PyTorch DistributedDataParallel over Gloo, 2 ranks x 1 thread, global batch 64
  py-loom  the same PyTorch script with its two DDP lines swapped for loom.distributed.init()
           and loom.parallel.DataParallel (a user's own loop on Loom's exchange)

on ResNet-18 at 64x64 (synthetic data), channels_last on all four, bf16 autocast where the CPU
has bf16 arithmetic (AVX-512 BF16 or AMX) and fp32 where it has not (--precision to choose).
Prints the ratios the issues set targets for: loom-dp / one (>= 0.97), loom-dp / ddp (>= 1.1),
py-loom / ddp (>= 2) and py-loom / loom-dp (>= 0.95), and Loom's share of the all-reduce
hidden behind backward.

Usage: bench/data_parallel_vs_ddp.py [--loom build/bin/loom] [--repeats 3] [--steps 40]
                                     [--precision auto|bf16|fp32]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

from host import native_bf16

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peers", "torch_ddp.py")


def loom_args(steps, precision):
    return ["--set", "model=resnet18", "--set", "data=synthetic", "--set", "data.image_size=64",
            "--set", "data.classes=10", "--set", "data.train_samples=4096",
            "--set", f"train.max_steps={steps}", "--set", "train.eval=false",
            "--set", "checkpoint.enabled=false", "--set", f"runtime.precision={precision}",
            # The peer's learning rate is constant too.
            "--set", "schedule.name=constant", "--set", "schedule.warmup_steps=0",
            "--set", "runtime.memory_format=channels_last", "--set", "train.tensorboard=false"]


def run_loom(loom, args, ranks):
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "train", "--out", out] + args
        if ranks > 1:
            cmd = [loom, "launch", "--nproc-per-node", str(ranks), "--"] + cmd
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f)


def run_ddp(steps, precision, wrapper="ddp", loom=None):
    env = dict(os.environ, LOOM_LOG_LEVEL="warn")
    if loom:
        env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(loom))),
                                         "python")
    out = subprocess.run([sys.executable, PEER, "--ranks", "2", "--threads", "1",
                          "--global-batch", "64", "--image-size", "64", "--steps", str(steps),
                          "--precision", precision, "--channels-last", "--wrapper", wrapper],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"])
    p.add_argument("--json", default="")
    a = p.parse_args()
    precision = a.precision if a.precision != "auto" else "bf16" if native_bf16() else "fp32"
    base = loom_args(a.steps, precision)
    one_args = base + ["--set", "data.batch_size=64", "--set", "runtime.threads=2"]
    dp_args = base + ["--set", "data.global_batch=64"]
    rates = {"one": [], "loom-dp": [], "ddp": [], "py-loom": []}
    overlap, exposed = [], []
    for _ in range(a.repeats):
        rates["one"].append(run_loom(a.loom, one_args, 1)["samples_per_second"])
        s = run_loom(a.loom, dp_args, 2)
        rates["loom-dp"].append(s["samples_per_second"])
        overlap.append(s["data_parallel"]["overlap"])
        exposed.append(s["step_time"]["share"]["comm_exposed"])
        rates["ddp"].append(run_ddp(a.steps, precision))
        rates["py-loom"].append(run_ddp(a.steps, precision, "loom", a.loom))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"ResNet-18 64x64 {precision}+channels_last, global batch 64; medians of {a.repeats}")
    for k, v in rates.items():
        print(f"  {k:8} {med[k]:8.1f} samples/s   runs: {', '.join(f'{x:.1f}' for x in v)}")
    print(f"  loom-dp / one = {med['loom-dp'] / med['one']:.3f}  (target >= 0.97)")
    print(f"  loom-dp / ddp = {med['loom-dp'] / med['ddp']:.3f}  (target >= 1.1)")
    print(f"  py-loom / ddp = {med['py-loom'] / med['ddp']:.3f}  (target >= 2)")
    print(f"  py-loom / loom-dp = {med['py-loom'] / med['loom-dp']:.3f}  (target >= 0.95)")
    print(f"  all-reduce hidden behind backward: {100 * statistics.median(overlap):.0f}%, "
          f"exposed communication {100 * statistics.median(exposed):.1f}% of the step")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"precision": precision, "rates": rates, "overlap": overlap,
                       "exposed_share": exposed}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
