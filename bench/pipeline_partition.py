#!/usr/bin/env python3
"""The automatic pipeline partition against the usual baselines, on the same block profile.

For each model at 224x224 and each stage count, `loom pipeline plan` profiles the blocks on this
machine and prints the slowest stage of its own partition, of an equal split by block count, and
of DeepSpeed's "parameters" method (the smallest possible largest stage by parameter count).
The target (issue 13): the automatic partition's slowest stage is at most either baseline's on
at least three models. Prints one row per case and the ratios baseline / automatic.
"""
import argparse
import json
import re
import subprocess
import sys

LINE = re.compile(r"slowest stage ([\d.]+) ms; uniform split ([\d.]+) ms, parameter-balanced ([\d.]+) ms")
STEP = re.compile(r"simulated step ([\d.]+) ms, bubble ([\d.]+)%")


def plan(loom, model, stages, microbatches):
    args = [loom, "pipeline", "plan", "--set", f"model={model}", "--set", "data=synthetic",
            "--set", "data.image_size=224", "--set", "data.channels=3", "--set", "data.classes=100",
            "--set", "data.train_samples=64", "--set", "data.test_samples=16",
            "--set", f"data.batch_size={4 * microbatches}",
            "--set", f"parallel.pipeline.stages={stages}",
            "--set", f"parallel.pipeline.microbatches={microbatches}"]
    if model == "vit_tiny":
        args += ["--set", "model.patch_size=16"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"loom pipeline plan failed for {model}: {out.stderr}")
    slowest, uniform, parameters = map(float, LINE.search(out.stdout).groups())
    step, bubble = map(float, STEP.search(out.stdout).groups())
    return {"model": model, "stages": stages, "microbatches": microbatches,
            "automatic_ms": slowest, "uniform_ms": uniform, "parameter_balanced_ms": parameters,
            "simulated_step_ms": step, "bubble_percent": bubble}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loom", default="build/bin/loom")
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"{'model':10} {'P':>2} {'auto ms':>9} {'uniform':>9} {'params':>9} "
          f"{'uniform/auto':>13} {'params/auto':>12}")
    for model in ["resnet18", "resnet50", "vit_tiny"]:
        for stages in [2, 4]:
            r = plan(args.loom, model, stages, 2 * stages)
            rows.append(r)
            print(f"{model:10} {stages:>2} {r['automatic_ms']:9.2f} {r['uniform_ms']:9.2f} "
                  f"{r['parameter_balanced_ms']:9.2f} {r['uniform_ms'] / r['automatic_ms']:13.2f} "
                  f"{r['parameter_balanced_ms'] / r['automatic_ms']:12.2f}")
    met = all(r["automatic_ms"] <= min(r["uniform_ms"], r["parameter_balanced_ms"]) + 1e-9
              for r in rows)
    print("target (automatic <= both baselines in every case):", "met" if met else "NOT met")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
