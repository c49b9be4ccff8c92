#!/usr/bin/env python3
"""The PyTorch peer of `loom launch ... loom train` for data parallelism: DistributedDataParallel
over Gloo (c10d), the same model, synthetic data, optimizer and per-rank batch, with one rank per
process started here. Prints one JSON object from rank 0: samples_per_second over all ranks
(steady state: the first min(5, steps/10) steps are not timed, as in Loom's summary).

--wrapper loom runs the very same script with its two DDP lines swapped for Loom's
(loom.distributed.init() and loom.parallel.DataParallel): a user's own loop on Loom's exchange.

Usage: torch_ddp.py --ranks 2 --threads 1 --global-batch 64 --image-size 64 --steps 40
"""
import argparse
import contextlib
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torchvision


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, a, port, result):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    if a.wrapper == "loom":
        import loom
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(a.ranks), LOCAL_RANK=str(rank),
                          LOCAL_WORLD_SIZE=str(a.ranks))
        loom.distributed.init()
        if a.loom_allocator:
            loom.runtime.configure(allocator="caching")
    else:
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=a.classes)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if a.wrapper == "loom":
        ddp = loom.parallel.DataParallel(model)
    else:
        ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if a.precision == "bf16"
                else contextlib.nullcontext())
    per_rank = a.global_batch // a.ranks
    g = torch.Generator().manual_seed(rank)
    images = torch.randint(0, 256, (per_rank * 4, a.image_size, a.image_size, 3), dtype=torch.uint8,
                           generator=g)
    labels = torch.randint(0, a.classes, (per_rank * 4,), generator=g)
    warmup = min(5, a.steps // 10)
    timed = 0.0
    for step in range(a.steps):
        t0 = time.perf_counter()
        i = (step % 4) * per_rank
        x = images[i:i + per_rank].permute(0, 3, 1, 2).float().contiguous(memory_format=fmt)
        x = x.div_(255).sub_(0.5).div_(0.25)
        y = labels[i:i + per_rank]
        opt.zero_grad()
        with autocast:
            out = ddp(x)
        loss = loss_fn(out.float(), y)
        loss.backward()
        opt.step()
        loss.item()
        if step >= warmup:
            timed += time.perf_counter() - t0
    if rank == 0:
        result.put((a.steps - warmup) * a.global_batch / timed)
    if a.wrapper == "ddp":
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--wrapper", default="ddp", choices=["ddp", "loom"])
    p.add_argument("--loom-allocator", action="store_true",
                   help="with --wrapper loom, also loom.runtime.configure(allocator='caching')")
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, a, port, result)) for r in range(a.ranks)]
    for proc in procs:
        proc.start()
    rate = result.get(timeout=1200)
    for proc in procs:
        proc.join()
    print(json.dumps({"samples_per_second": rate, "ranks": a.ranks, "threads": a.threads,
                      "precision": a.precision, "channels_last": a.channels_last,
                      "wrapper": a.wrapper}))


if __name__ == "__main__":
    main()
