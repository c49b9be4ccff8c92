#!/usr/bin/env python3
"""A script's own model as a loom.pipeline.Pipeline against `loom train`'s pipeline on the same
blocks, split and schedule (issue 31's target: at least 0.9x).

Loom's side is `loom bench pipeline` (the executor `loom train` runs, on one fixed batch, after
its plan chose the split); the peer is bench/peers/pipeline_script.py: torchvision's ResNet-18
cut into the zoo's ten blocks (stem, eight residual blocks, head), channels_last and fp32 as
Loom runs it, one thread per rank, Loom's caching allocator (loom.runtime.configure, as `loom
train` installs it), the same split, schedule, micro-batches and fixed batch.
Both under `loom launch --nproc-per-node 2`, alternated --repeats times; medians and the ratio.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def launch(loom, command):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    full = [loom, "launch", "--nproc-per-node", "2", "--"] + command + ["--json", out]
    r = subprocess.run(full, capture_output=True, text=True,
                       env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    if r.returncode != 0:
        sys.exit(f"{' '.join(full)} failed:\n{r.stdout}\n{r.stderr}")
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default="build/bin/loom")
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--allocator", default="caching", choices=["caching", "system"],
                   help="the script's allocator (loom.runtime.configure)")
    p.add_argument("--json")
    a = p.parse_args()
    settings = [f"model.name=resnet18", "data.source=synthetic", f"data.image_size={a.image_size}",
                "data.channels=3", "data.classes=100", "data.train_samples=64",
                "data.test_samples=16", f"data.batch_size={a.batch}",
                f"parallel.pipeline.microbatches={a.microbatches}",
                f"parallel.pipeline.schedule={a.schedule}",
                f"parallel.pipeline.chunks={2 if a.schedule == 'interleaved' else 1}",
                "runtime.precision=fp32",
                "runtime.memory_format=channels_last"]
    loom_command = [a.loom, "bench", "pipeline", "--steps", str(a.steps)]
    for s in settings:
        loom_command += ["--set", s]
    loom_rates, script_rates, ratios = [], [], []
    for _ in range(a.repeats):
        ours = launch(a.loom, loom_command)
        peer = launch(a.loom, [sys.executable, os.path.join(HERE, "peers", "pipeline_script.py"),
                               "--split", ours["split"], "--schedule", a.schedule,
                               "--microbatches", str(a.microbatches), "--batch", str(a.batch),
                               "--image-size", str(a.image_size), "--steps", str(a.steps),
                               "--allocator", a.allocator])
        loom_rates.append(ours["measured_samples_per_second"])
        script_rates.append(peer["measured_samples_per_second"])
        ratios.append(script_rates[-1] / loom_rates[-1])
        print(f"split {ours['split']}: loom bench pipeline {loom_rates[-1]:.1f} samples/s, "
              f"Python Pipeline {script_rates[-1]:.1f} samples/s, ratio {ratios[-1]:.3f}",
              flush=True)
    result = {"schedule": a.schedule, "allocator": a.allocator, "image_size": a.image_size, "batch": a.batch,
              "microbatches": a.microbatches, "split": ours["split"],
              "loom_samples_per_second": statistics.median(loom_rates),
              "python_samples_per_second": statistics.median(script_rates),
              "ratio": statistics.median(ratios)}
    print(f"median: loom {result['loom_samples_per_second']:.1f}, Python "
          f"{result['python_samples_per_second']:.1f} samples/s, ratio {result['ratio']:.3f} "
          f"(target >= 0.9)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
