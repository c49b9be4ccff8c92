"""A user's script that trains a TorchScript module data parallel on loom.data.Loader's batches
and commits a Loom checkpoint after STOP steps, for `loom train --resume` to go on from
(test_parallel.py). Its loss and optimizer are what the configuration gives `loom train`:
cross-entropy, SGD with momentum (no Nesterov, no weight decay) at a constant rate.

    handoff.py CONFIG CHECKPOINTS STOP
"""
import json
import sys
import warnings

import torch

import loom


def main():
    config_path, checkpoints, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(config_path) as f:
        config = json.load(f)
    job = loom.distributed.init(config)
    model = loom.parallel.DataParallel(load_torchscript(config["model"]["torchscript"]))
    opt = config["optimizer"]
    optimizer = torch.optim.SGD(model.parameters(), lr=opt["lr"], momentum=opt["momentum"])
    loader = loom.data.Loader(config, rank=job.rank, world=job.world)
    loader.set_epoch(0)
    step = 0
    for images, labels in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
        step += 1
        if step == stop:
            break
    loom.checkpoint.save(checkpoints, step, model=model, optimizer=optimizer, loader=loader,
                         samples=step * job.world * config["data"]["batch_size"])
    model.close()


def load_torchscript(path):
    """The very file `loom train` reads (model: {torchscript: ...}), so that both start from the
    same weights under the same names. torch 2.5+ deprecates TorchScript from Python; loading it
    is this script's point, so torch.jit.load's DeprecationWarning is ignored here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.load` is deprecated", DeprecationWarning)
        return torch.jit.load(path)


if __name__ == "__main__":
    main()
