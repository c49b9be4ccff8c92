#!/usr/bin/env python3
"""fp32 matrix products: MKL, inside the torch wheel that Loom links, against OpenBLAS, the one
numpy's wheel ships in the same environment, on this host.

Loom's fp32 products are torch's (`at::mm`, `at::addmm`), and the pip wheel does them with
Intel's MKL, linked into libtorch_cpu.so. MKL's reputation on AMD processors (slower code paths
chosen by vendor) is the question this answers on whatever host runs it: each case is timed
under both libraries, interleaved, in fresh processes with the same thread count.

  cases   1024 x 1024 x 1024, and the products of the GPT the benchmarks train (6 x 384,
          T 256, B 8: 2048 tokens): attention's qkv (2048x384 . 384x1152), its output
          (2048x384 . 384x384), the MLP's two (2048x384 . 384x1536, 2048x1536 . 1536x384)
  threads 1 and 2

Prints GFLOP/s (best of 20 calls per process, median over R processes) and MKL / OpenBLAS.

Usage: bench/blas.py [--repeats R] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

PYTHON = sys.executable  # the project's .venv: torch (MKL) and numpy (OpenBLAS)
CASES = {"1024^3": (1024, 1024, 1024), "gpt qkv": (2048, 384, 1152),
         "gpt attention out": (2048, 384, 384), "gpt mlp up": (2048, 384, 1536),
         "gpt mlp down": (2048, 1536, 384)}

TIMER = """
import sys, time
m, k, n, library = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if library == "mkl":
    import torch
    a, b = torch.randn(m, k), torch.randn(k, n)
    product = lambda: torch.mm(a, b)
else:
    import numpy
    rng = numpy.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=numpy.float32)
    b = rng.standard_normal((k, n), dtype=numpy.float32)
    product = lambda: a @ b
product()
best = 0.0
for _ in range(20):
    t = time.perf_counter(); product(); t = time.perf_counter() - t
    best = max(best, 2 * m * k * n / t)
print(best / 1e9)
"""


def gflops(shape, library, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([PYTHON, "-c", TIMER, *map(str, shape), library], check=True,
                         capture_output=True, text=True, env=env).stdout
    return float(out.strip())


def cpu_model():
    with open("/proc/cpuinfo") as f:
        fields = {}
        for line in f:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return (f"{fields.get('vendor_id', '?')} {fields.get('model name', '?')} (family "
            f"{fields.get('cpu family', '?')}, model {fields.get('model', '?')})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    versions = subprocess.run(
        [PYTHON, "-c", "import torch, numpy; blas = numpy.__config__.CONFIG['Build Dependencies']"
         "['blas']; print(f\"torch {torch.__version__} (BLAS: {torch.backends.mkl.is_available() "
         "and 'MKL'}), numpy {numpy.__version__} (BLAS: {blas['name']} {blas['version']})\")"],
        check=True, capture_output=True, text=True).stdout.strip()
    print(f"host: {cpu_model()}, {os.cpu_count()} cores, {platform.machine()}")
    print(versions)
    runs = {}
    for _ in range(a.repeats):
        for name, shape in CASES.items():
            for threads in (1, 2):
                for library in ("mkl", "openblas"):
                    runs.setdefault(f"{name}, {threads} thread(s), {library}", []).append(
                        gflops(shape, library, threads))
    med = {k: statistics.median(v) for k, v in runs.items()}
    ratios = {}
    for name in CASES:
        for threads in (1, 2):
            case = f"{name}, {threads} thread(s)"
            mkl, openblas = med[f"{case}, mkl"], med[f"{case}, openblas"]
            ratios[case] = mkl / openblas
            print(f"{case:32} MKL {mkl:7.1f}  OpenBLAS {openblas:7.1f} GFLOP/s   "
                  f"MKL / OpenBLAS {ratios[case]:5.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": cpu_model(), "medians": med, "runs": runs, "ratios": ratios}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
