#!/usr/bin/env python3
"""The PyTorch peer of `loom bench comm --backends tcp`: all-reduce of fp32 tensors over torch's
own gloo backend (c10d), one rank per process, timed the way Loom's benchmark times its own:
two warm-up calls, then per size repeated calls, each after a barrier, until 0.3 s or 200 calls
(at least 5); rank 0 decides when to stop and tells the others with a broadcast outside the
timed call. Rank 0 prints one JSON object: {"rows": [{"bytes", "median_seconds", "repeats"}]}.

Usage (one per host): torch_gloo_allreduce.py --rank R --world N --master ADDR:PORT
                      [--sizes 4096,4194304,67108864] [--json FILE]
"""
import argparse
import json
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def time_allreduce(tensor, seconds_per_case=0.3, min_repeats=5, max_repeats=200):
    for _ in range(2):
        dist.all_reduce(tensor)
    times, more = [], torch.ones(1, dtype=torch.int32)
    started = time.perf_counter()
    while True:
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(tensor)
        times.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        more.fill_(len(times) < min_repeats or
                   (elapsed < seconds_per_case and len(times) < max_repeats))
        dist.broadcast(more, 0)
        if int(more) == 0:
            return statistics.median_high(times), len(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--master", required=True, help="ADDR:PORT of rank 0's store")
    parser.add_argument("--sizes", default="4096,4194304,67108864", help="bytes, comma-separated")
    parser.add_argument("--json")
    a = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world, timeout=timedelta(seconds=120))
    rows = []
    for nbytes in (int(s) for s in a.sizes.split(",")):
        tensor = torch.ones(nbytes // 4, dtype=torch.float32)
        seconds, repeats = time_allreduce(tensor)
        shared = torch.tensor([seconds], dtype=torch.float64)
        dist.broadcast(shared, 0)  # rank 0's median, as Loom's benchmark reports
        rows.append({"bytes": nbytes, "median_seconds": float(shared), "repeats": repeats})
    if a.rank == 0:
        text = json.dumps({"backend": "torch-gloo", "world": a.world, "rows": rows})
        if a.json:
            with open(a.json, "w") as f:
                f.write(text + "\n")
        print(text)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
