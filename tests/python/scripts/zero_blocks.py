"""A user's own script under loom.parallel.DataParallel(zero=N) (run by test_zero.py): a small
model of blocks, its own loss and loop. Every rank reads its equal share of each global batch;
rank 0 saves the final parameters to OUT after close().

    zero_blocks.py OUT [--zero N] [--optimizer sgd|adamw] [--model seq|list] [--accumulate]
                       [--checkpoint DIR [--stop-after N] [--resume]] [--wrong-optimizer]

--model seq is an nn.Sequential (its children with parameters are ZeRO-3's blocks); list keeps
its blocks in an nn.ModuleList, with a stem, a norm and a head outside them. --checkpoint saves
a Loom checkpoint into DIR after the last step (before close()), or after step N with
--stop-after N, which then ends the run; --resume goes on from DIR's newest. --wrong-optimizer builds the
optimizer over model.parameters(), which zero > 0 refuses.
"""
import sys

import torch

import loom

GLOBAL_BATCH = 24
STEPS = 4


class Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()) for _ in range(3))
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(self.norm(h))


def make_model(kind):
    if kind == "list":
        return Blocks()
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 3))


def main():
    out = sys.argv[1]
    zero = int(argument("--zero") or 0)
    job = loom.distributed.init()
    torch.manual_seed(job.rank)  # DataParallel gives every rank rank 0's parameters
    model = loom.parallel.DataParallel(make_model(argument("--model") or "seq"), zero=zero,
                                       bucket_mb=0.001, first_bucket_mb=0.0005)
    parameters = (model.parameters() if "--wrong-optimizer" in sys.argv
                  else model.optimizer_parameters())
    if argument("--optimizer") == "adamw":
        optimizer = torch.optim.AdamW(parameters, lr=0.01, weight_decay=0.1)
    else:
        optimizer = torch.optim.SGD(parameters, lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    x = torch.randn(GLOBAL_BATCH * STEPS, 8, generator=data)
    y = torch.randint(0, 3, (GLOBAL_BATCH * STEPS,), generator=data)
    per_rank = GLOBAL_BATCH // job.trainers
    checkpoints = argument("--checkpoint")
    first_step = 0
    if "--resume" in sys.argv:
        first_step = loom.checkpoint.load(checkpoints, model=model, optimizer=optimizer)["step"]
    last_step = int(argument("--stop-after") or STEPS)
    for step in range(first_step, last_step):
        first = step * GLOBAL_BATCH + job.rank * per_rank
        optimizer.zero_grad()
        if "--accumulate" in sys.argv:
            # Two halves: the first only accumulates, the second exchanges the sum.
            half = per_rank // 2
            with model.no_sync():
                loss_of(model, x, y, first, first + half).backward()
            loss_of(model, x, y, first + half, first + per_rank).backward()
        else:
            loss_of(model, x, y, first, first + per_rank).backward()
        model.step(optimizer)
    if checkpoints:
        loom.checkpoint.save(checkpoints, last_step, model=model, optimizer=optimizer)
    model.close()
    if job.rank == 0:
        torch.save(model.module.state_dict(), out)


def loss_of(model, x, y, begin, end):
    # Each half of an accumulated step weighs half of the rank's share.
    weight = (end - begin) / (GLOBAL_BATCH // loom.distributed.current().trainers)
    return weight * torch.nn.functional.cross_entropy(model(x[begin:end]), y[begin:end])


def argument(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


if __name__ == "__main__":
    main()
