#!/usr/bin/env python3
"""Pipelines measured against their simulation, and against one process on the same batch.

`loom bench pipeline` under `loom launch --nproc-per-node 2` runs a schedule for real (one thread
per rank, a fixed batch) and prints the simulator's prediction from the blocks profiled in the
same processes; one process with both threads runs the same global batch as the reference.
Each case runs --repeats times; the table shows medians. Issue 13's targets: measured within
10% of simulated (GPipe, 1F1B, interleaved), at least 90% of the simulated throughput, 1F1B's
stage 0 peak far below GPipe's.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb_h1", 1)]


def run(loom, config, ranks, schedule, chunks, steps):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    bench = [loom, "bench", "pipeline", config, "--steps", str(steps), "--json", out,
             "--set", f"parallel.pipeline.schedule={schedule}",
             "--set", f"parallel.pipeline.chunks={chunks}"]
    cmd = [loom, "launch", "--nproc-per-node", str(ranks), "--"] + bench if ranks > 1 else bench
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loom", default="build/bin/loom")
    parser.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "..",
                                                         "examples", "pipeline.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    one = [run(args.loom, args.config, 1, "1f1b", 1, args.steps) for _ in range(args.repeats)]
    one_rate = statistics.median(r["measured_samples_per_second"] for r in one)
    one_peak = statistics.median(r["peak_memory_mb"][0] for r in one)
    print(f"one process, 2 threads: {one_rate:.1f} samples/s, peak {one_peak:.0f} MB")
    print(f"{'schedule':12} {'split':9} {'sim ms':>8} {'meas ms':>8} {'meas/sim':>9} "
          f"{'% of sim':>9} {'samples/s':>10} {'vs 1 proc':>10} {'peak MB per rank':>18}")
    for schedule, chunks in CASES:
        results = [run(args.loom, args.config, 2, schedule, chunks, args.steps)
                   for _ in range(args.repeats)]
        sim = statistics.median(r["simulated_step_seconds"] for r in results)
        meas = statistics.median(r["measured_step_seconds"] for r in results)
        ratio = statistics.median(r["measured_step_seconds"] / r["simulated_step_seconds"]
                                  for r in results)
        rate = statistics.median(r["measured_samples_per_second"] for r in results)
        peaks = [statistics.median(r["peak_memory_mb"][k] for r in results) for k in range(2)]
        row = {"schedule": schedule, "chunks": chunks, "split": results[0]["split"],
               "simulated_step_seconds": sim, "measured_step_seconds": meas,
               "measured_over_simulated": ratio, "samples_per_second": rate,
               "vs_one_process": rate / one_rate, "peak_memory_mb": peaks}
        rows.append(row)
        print(f"{schedule:12} {row['split']:9} {1e3 * sim:8.1f} {1e3 * meas:8.1f} {ratio:9.3f} "
              f"{100 / ratio:8.0f}% {rate:10.1f} {rate / one_rate:10.2f} "
              f"{peaks[0]:8.0f} {peaks[1]:8.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"one_process_samples_per_second": one_rate,
                       "one_process_peak_mb": one_peak, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
