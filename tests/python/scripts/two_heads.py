"""A user's own training script (run by test_parallel.py): a model with two heads, a loss of its
own and its own loop, data parallel through loom.parallel.DataParallel. Every rank reads its
equal share of each global batch; rank 0 saves the final parameters to ARGV[1].

    two_heads.py OUT [--unused] [--accumulate] [--mismatch] [--servers [--async]]
                     [--compile BACKEND] [--record]

With --async the servers keep the parameters and every worker saves its own to OUT.rankN, and
its starting ones to OUT.startN. --checkpoint DIR commits a Loom checkpoint there after every
step; --resume goes on from its newest; --stop-after N ends the run after step N's. --steps DIR
accounts the steps with loom.profile.Steps into DIR (given the DataParallel; with --steps-module
its `.module`).

--preemptible asks job.should_stop() after every step (after its checkpoint) and exits with
loom.PREEMPTED when it says so, and resumes by itself in a restarted attempt (loom launch
--max-restarts); --sigterm-at N makes rank 1 send itself SIGTERM during step N;
--stall-timeout S sets train.stall_timeout_s for the stall watchdog that should_stop() keeps.

--compile BACKEND passes the DataParallel through torch.compile(model, backend=BACKEND), as a user
would (its step(), no_sync(), close() and .module are reached through the compiled wrapper).
--record writes OUT.record<rank>.json: this rank's loss at every step (the mean over its rows),
the exchange's last stats, and what torch.compile captured (torch._dynamo's counters).
"""
import json
import os
import signal
import sys

import torch

import loom

GLOBAL_BATCH = 24
STEPS = 5


class TwoHeads(torch.nn.Module):
    def __init__(self, unused_head=False, classes=3):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                         torch.nn.LayerNorm(16))
        self.classes = torch.nn.Linear(16, classes)
        self.value = torch.nn.Linear(16, 1)
        self.spare = torch.nn.Linear(16, 2) if unused_head else None

    def forward(self, x):
        h = self.trunk(x)
        return self.classes(h), self.value(h)


def main():
    out = sys.argv[1]
    mode = "async" if "--async" in sys.argv else "sync"
    config = {}
    if "--servers" in sys.argv:
        config["parallel"] = {"ps": {"mode": mode}}
    if argument("--stall-timeout"):
        config["train"] = {"stall_timeout_s": float(argument("--stall-timeout"))}
    job = loom.distributed.init(config, preemptible="--preemptible" in sys.argv)
    # Each rank starts from other weights: DataParallel gives every rank rank 0's.
    torch.manual_seed(job.rank)
    # --mismatch: rank 1 builds its model with another number of classes.
    classes = 4 if "--mismatch" in sys.argv and job.rank == 1 else 3
    # --servers: the job's parameter servers (loom launch --servers K) instead of all-reduce.
    wrap = loom.parallel.ParameterServers if "--servers" in sys.argv else loom.parallel.DataParallel
    model = wrap(TwoHeads(unused_head="--unused" in sys.argv, classes=classes),
                 bucket_mb=0.001, first_bucket_mb=0.0005)
    if argument("--compile"):
        model = torch.compile(model, backend=argument("--compile"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if "--async" in sys.argv:
        torch.save(model.module.state_dict(), f"{out}.start{job.rank}")
    data = torch.Generator().manual_seed(1)
    x = torch.randn(GLOBAL_BATCH * STEPS, 8, generator=data)
    y = torch.randint(0, 3, (GLOBAL_BATCH * STEPS,), generator=data)
    z = torch.randn(GLOBAL_BATCH * STEPS, 1, generator=data)
    per_rank = GLOBAL_BATCH // job.trainers  # the workers; servers do not run this far
    checkpoints = argument("--checkpoint")
    first_step = 0
    if "--resume" in sys.argv or job.attempt > 0:
        first_step = loom.checkpoint.load(checkpoints, model=model, optimizer=optimizer)["step"]
        print(f"rank {job.rank}: resumed_from={first_step}", flush=True)
    stop_after = int(argument("--stop-after") or STEPS)
    steps = None
    if argument("--steps"):
        accounted = model.module if "--steps-module" in sys.argv else model
        steps = loom.profile.Steps(argument("--steps"), model=accounted, optimizer=optimizer,
                                   config={"train": {"log_every": 1}}, warmup_steps=1)
    losses = []
    for step in (steps.loop if steps else iter)(range(first_step, min(STEPS, stop_after))):
        first = step * GLOBAL_BATCH + job.rank * per_rank
        rows = slice(first, first + per_rank)
        optimizer.zero_grad()
        if "--accumulate" in sys.argv:
            # Two halves: the first only accumulates, the second exchanges the sum.
            half = per_rank // 2
            parts = [slice(rows.start, rows.start + half), slice(rows.start + half, rows.stop)]
            with model.no_sync():
                loss_of(model, x[parts[0]], y[parts[0]], z[parts[0]], 0.5).backward()
            loss_of(model, x[parts[1]], y[parts[1]], z[parts[1]], 0.5).backward()
        else:
            loss = loss_of(model, x[rows], y[rows], z[rows], 1.0)
            loss.backward()
            losses.append(loss.item())
        if argument("--sigterm-at") == str(step) and job.rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # caught: the step goes on
        model.step(optimizer)
        if steps:
            steps.record(samples=per_rank)
        if checkpoints:
            loom.checkpoint.save(checkpoints, step + 1, model=model, optimizer=optimizer,
                                 extra={"script": "two_heads"})
        if "--preemptible" in sys.argv and job.should_stop(step + 1):
            raise SystemExit(loom.PREEMPTED)
    if steps:
        steps.close()
    model.close()
    if job.rank == 0:
        torch.save(model.module.state_dict(), out)
    if "--async" in sys.argv:
        torch.save(model.module.state_dict(), f"{out}.rank{job.rank}")
    if "--record" in sys.argv:
        record(f"{out}.record{job.rank}.json", losses, model.exchange_stats())


def record(path, losses, exchange):
    from torch._dynamo.utils import counters
    compiled = {"unique_graphs": counters["stats"]["unique_graphs"],
                "calls_captured": counters["stats"]["calls_captured"],
                "graph_breaks": sum(counters["graph_break"].values()),
                "inductor_graphs": counters["inductor"]["fxgraph_cache_miss"] +
                counters["inductor"]["fxgraph_cache_hit"]}
    with open(path, "w") as f:
        json.dump({"losses": losses, "exchange": exchange, "compiled": compiled}, f)


def argument(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


def loss_of(model, x, y, z, weight):
    logits, value = model(x)
    return weight * (torch.nn.functional.cross_entropy(logits, y) +
                     0.5 * ((value - z) ** 2).mean())


if __name__ == "__main__":
    from script_errors import run_reporting_errors
    run_reporting_errors(main)
