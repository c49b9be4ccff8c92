#!/usr/bin/env python3
"""A model that needs more memory than one rank may use trains as a 2-stage pipeline within it.

`loom train` runs ResNet-50 at 224x224 (bf16 autocast, SGD with momentum) twice on the same
steps: in one process with micro-batches of 2 accumulated 4 times, and under
`loom launch --nproc-per-node 2` as a 1F1B pipeline of 4 micro-batches of 2 with
parallel.pipeline.memory_cap_mb set below what the one process measured. Both read the same
samples. The table shows each run's steady-state throughput (median over --repeats runs) and
peak tensor memory (caching allocator, per rank for the pipeline), the pipeline's plan
(predicted stage memory, simulated step) and whether every rank stayed under the cap.
Issue 13's target: the model trains under 2 stages within the cap.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--set", "model=resnet50", "--set", "data=synthetic", "--set", "data.image_size=224",
         "--set", "data.classes=100", "--set", "data.train_samples=256", "--set",
         "data.test_samples=16", "--set",
         "train.eval=false", "--set", "checkpoint.enabled=false", "--set", "train.log_every=8"]


def train(loom, ranks, extra, steps, cap):
    out = tempfile.mkdtemp(prefix="loom-pipe-mem-")
    cmd = [loom, "train"] + MODEL + ["--set", f"train.max_steps={steps}", "--out", out] + extra
    if ranks > 1:
        cmd = [loom, "launch", "--nproc-per-node", str(ranks), "--"] + cmd + [
            "--set", f"parallel.pipeline.stages={ranks}",
            "--set", f"parallel.pipeline.memory_cap_mb={cap}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    return summary, r.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loom", default="build/bin/loom")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--cap-mb", type=float, default=350)
    parser.add_argument("--json")
    args = parser.parse_args()

    one = [train(args.loom, 1, ["--set", "data.batch_size=2", "--set", "train.grad_accum=4"],
                 args.steps, 0)[0] for _ in range(args.repeats)]
    piped = [train(args.loom, 2, ["--set", "data.batch_size=8",
                                  "--set", "parallel.pipeline.microbatches=4"],
                   args.steps, args.cap_mb) for _ in range(args.repeats)]
    one_rate = statistics.median(s["samples_per_second"] for s in one)
    one_peak = statistics.median(s["memory"]["peak_cached_bytes_in_use"] / 2**20 for s in one)
    pipe_rate = statistics.median(s["samples_per_second"] for s, _ in piped)
    peaks = [max(s["pipeline"]["peak_memory_mb"][r] for s, _ in piped) for r in range(2)]
    bubble = statistics.median(s["step_time"]["share"]["bubble"] for s, _ in piped)
    plan = [line for line in piped[0][1].splitlines()
            if line.startswith(("  stage", "simulated step"))]

    print(f"ResNet-50 224x224 bf16, {args.steps} steps of 8 samples, medians of {args.repeats}")
    print(f"one process, 2 threads:  {one_rate:6.1f} samples/s, peak {one_peak:.0f} MB "
          f"({'over' if one_peak > args.cap_mb else 'under'} the {args.cap_mb:.0f} MB cap)")
    print(f"2-stage 1F1B pipeline:   {pipe_rate:6.1f} samples/s, peak per rank "
          f"{peaks[0]:.0f} / {peaks[1]:.0f} MB (max over runs), measured bubble {100 * bubble:.0f}%")
    print("\n".join(plan))
    within = all(p <= args.cap_mb for p in peaks)
    print(f"pipeline / one process: throughput {pipe_rate / one_rate:.2f}x, largest rank's peak "
          f"{max(peaks) / one_peak:.2f}x; every rank within the cap: {'yes' if within else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cap_mb": args.cap_mb, "one_process": {"samples_per_second": one_rate,
                                                              "peak_mb": one_peak},
                       "pipeline": {"samples_per_second": pipe_rate, "peak_mb": peaks,
                                    "bubble": bubble, "plan": plan},
                       "within_cap": within}, f, indent=2)


if __name__ == "__main__":
    main()
