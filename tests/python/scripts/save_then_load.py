"""Every rank saves a checkpoint and loads it at once, blocking and in the background; each rank
writes what it saw to OUT/rank<R>.json. Run with `loom launch --nproc-per-node 2` and
LOOM_FAULT_SLOW_SAVE_MS, so that rank 0's writes take long enough for a rank that did not wait
for the commit to find none."""
import json
import os
import sys

import torch

import loom


def main():
    out = sys.argv[1]
    checkpoints = os.path.join(out, "checkpoints")
    job = loom.distributed.init()
    torch.manual_seed(0)  # the same model on every rank
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    seen = {"rank": job.rank}

    def train_step():
        optimizer.zero_grad()
        model(torch.ones(2, 4)).pow(2).sum().backward()
        optimizer.step()

    train_step()
    seen["blocking_path"] = loom.checkpoint.save(checkpoints, 1, model=model,
                                                 optimizer=optimizer)
    fresh = torch.nn.Linear(4, 3)
    seen["blocking_loaded_step"] = loom.checkpoint.load(checkpoints, model=fresh)["step"]
    seen["blocking_same"] = torch.equal(fresh.weight, model.weight)

    train_step()
    saved = model.weight.detach().clone()
    pending = loom.checkpoint.save(checkpoints, 2, model=model, optimizer=optimizer,
                                   blocking=False)
    seen["done_at_once"] = pending.done()
    train_step()  # training goes on while rank 0 writes step 2's copy
    seen["background_path"] = pending.wait()
    seen["blocked_seconds"] = pending.blocked_seconds
    seen["background_seconds"] = pending.background_seconds
    seen["background_loaded_step"] = loom.checkpoint.load(checkpoints, model=fresh)["step"]
    seen["background_holds_the_copy"] = torch.equal(fresh.weight, saved)

    loom.distributed.barrier()
    # Left in flight: the process waits for it before it exits.
    loom.checkpoint.save(checkpoints, 3, model=model, optimizer=optimizer, blocking=False)
    with open(os.path.join(out, f"rank{job.rank}.json"), "w") as f:
        json.dump(seen, f)


if __name__ == "__main__":
    main()
