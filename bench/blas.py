#!/usr/bin/env python3
"""fp32 on netlib's reference BLAS against Debian's OpenBLAS for OpenMP, the two libraries
libblas.so.3 can be on Debian. Debian's LibTorch calls libblas.so.3 for fp32 matrix products;
without libopenblas0-openmp installed that is the reference implementation. Each case runs under
both, interleaved, in the same run: the reference one by putting its folder first on
LD_LIBRARY_PATH (what a machine without OpenBLAS resolves), the other as installed.

  matmul      1024x1024 fp32 products through LibTorch (Debian's python3-torch, the same
              LibTorch), GFLOP/s on 1 and 2 threads, best of a few
  loom train  mlp (Fashion-MNIST) and vit_tiny (224x224 synthetic), runtime.precision=fp32,
              steady-state samples/s; summary.json
              says which BLAS each run found, and the advisor's finding on the reference one

Prints OpenBLAS / reference for each. Medians of R repeats.

Usage: bench/blas.py [--loom build/bin/loom] [--repeats R] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable  # the project's .venv: Loom's torch, the peers' torch
LIB = "/usr/lib/x86_64-linux-gnu"
REFERENCE_PATH = f"{LIB}/blas:{LIB}/lapack"  # netlib's, as libblas3 and liblapack3 install them

MATMUL = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
torch.mm(a, b)
best = 0.0
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); torch.mm(a, b); t = time.perf_counter() - t
    best = max(best, 2 * 1024 ** 3 / t)
print(best / 1e9)
"""


def env_for(blas):
    env = dict(os.environ, LOOM_LOG_LEVEL="error")
    if blas == "reference":
        env["LD_LIBRARY_PATH"] = REFERENCE_PATH
    return env


def matmul_gflops(blas, threads):
    runs = "3" if blas == "reference" else "20"
    out = subprocess.run([PYTHON, "-c", MATMUL, str(threads), runs], check=True,
                         capture_output=True, text=True, env=env_for(blas)).stdout
    return float(out.strip())


def train(loom, blas, model, steps, batch, data):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([loom, "train", "--out", out, "--set", f"model={model}", *data,
                        "--set", "runtime.precision=fp32", "--set", f"train.max_steps={steps}",
                        "--set", f"data.batch_size={batch}",
                        "--set", "train.eval=false", "--set", "checkpoint.enabled=false",
                        "--set", "train.tensorboard=false"],
                       check=True, stdout=subprocess.DEVNULL, env=env_for(blas))
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    finding = [f for f in s["findings"] if f["id"] == "reference_blas"]
    return s["samples_per_second"], s["blas"]["library"], bool(finding)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    if not os.path.exists(f"{LIB}/blas/libblas.so.3"):
        print("skipped: netlib's reference BLAS (libblas3) is not installed")
        return 0
    # Steps, batch and data per model: enough for a steady state, short enough on the reference
    # BLAS, where vit_tiny (224x224 synthetic images, 196 patches) trains a few samples a second.
    vit_data = ["--set", "data=synthetic", "--set", "data.image_size=224",
                "--set", "data.channels=3"]
    steps = {"mlp": (200, 64, []), "vit_tiny": (12, 16, vit_data)}
    runs = {}
    for _ in range(a.repeats):
        for blas in ("openblas", "reference"):
            for threads in (1, 2):
                runs.setdefault(f"matmul {threads} thread(s), {blas}", []).append(
                    matmul_gflops(blas, threads))
            for model, (n, batch, data) in steps.items():
                rate, found, advised = train(a.loom, blas, model, n, batch, data)
                runs.setdefault(f"loom train {model} fp32, {blas}", []).append(rate)
                runs.setdefault(f"found {blas}", []).append(found)
                runs.setdefault(f"advised {blas}", []).append(advised)
    med = {k: statistics.median(v) for k, v in runs.items() if not k.startswith(("found", "advised"))}
    for k, v in med.items():
        unit = "GFLOP/s" if k.startswith("matmul") else "samples/s"
        print(f"{k:40} {v:8.1f} {unit}   runs {[round(x, 1) for x in runs[k]]}")
    print(f"BLAS found by loom train: {sorted(set(runs['found openblas']))} (installed), "
          f"{sorted(set(runs['found reference']))} (reference on LD_LIBRARY_PATH); "
          f"reference_blas finding given: openblas {any(runs['advised openblas'])}, "
          f"reference {all(runs['advised reference'])}")
    ratios = {}
    for case in ["matmul 1 thread(s)", "matmul 2 thread(s)", "loom train mlp fp32",
                 "loom train vit_tiny fp32"]:
        ratios[case] = med[f"{case}, openblas"] / med[f"{case}, reference"]
        print(f"{case:40} OpenBLAS / reference {ratios[case]:6.1f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"medians": med, "runs": runs, "ratios": ratios}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
