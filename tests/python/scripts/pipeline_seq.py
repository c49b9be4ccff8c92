"""A user's own model as a torch.nn.Sequential, split into pipeline stages by
loom.pipeline.Pipeline (run by test_pipeline.py under `loom launch`). Its activations change
shape between stages ([B, 32], then [B, 4, 8], then [B, 32] again), its targets are floats of
shape [B, 3], and its loss is its own. Every rank saves its stages' final tensors to
OUT.<schedule>.rank<r>.

    pipeline_seq.py OUT --schedules gpipe,1f1b [--pipeline-ranks P] [--steps DIR]
                    [--checkpoint DIR]

--steps DIR accounts the first schedule's steps with loom.profile.Steps into DIR, and
--checkpoint DIR commits its final stages (gathered) as a Loom checkpoint there; --load DIR
loads that checkpoint into fresh stages, saves them to OUT.loaded.rank<r> and trains nothing.
reference()
trains the same model in one process on the same global batches, for comparison.
"""
import sys

import torch

import loom

GLOBAL_BATCH = 24
STEPS = 4


def make_model():
    torch.manual_seed(0)  # the same initial values on every rank and in the reference
    return torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.Tanh(),
        torch.nn.Unflatten(1, (4, 8)),
        torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 3))


def loss_fn(output, targets):
    return torch.nn.functional.smooth_l1_loss(output, targets) + 0.1 * output.pow(2).mean()


def batches():
    data = torch.Generator().manual_seed(1)
    x = torch.randn(GLOBAL_BATCH * STEPS, 8, generator=data)
    y = torch.randn(GLOBAL_BATCH * STEPS, 3, generator=data)
    return [(x[s * GLOBAL_BATCH:(s + 1) * GLOBAL_BATCH], y[s * GLOBAL_BATCH:(s + 1) * GLOBAL_BATCH])
            for s in range(STEPS)]


def make_optimizer(parameters):
    return torch.optim.SGD(parameters, lr=0.05, momentum=0.9)


def microbatches(schedule, ranks):
    # interleaved needs a multiple of the pipeline's ranks, 1f1b at least as many as ranks
    return 6 if ranks == 3 else 4


def reference():
    """The same steps in one process, on whole global batches."""
    model = make_model()
    optimizer = make_optimizer(model.parameters())
    for x, y in batches():
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return model.state_dict()


def main():
    out = sys.argv[1]
    job = loom.distributed.init()
    ranks = int(argument("--pipeline-ranks") or job.world)
    for i, schedule in enumerate(argument("--schedules").split(",")):
        pipe = loom.pipeline.Pipeline(make_model(), loss_fn=loss_fn, schedule=schedule,
                                      microbatches=microbatches(schedule, ranks),
                                      pipeline_ranks=ranks)
        optimizer = make_optimizer(pipe.parameters())
        if argument("--load"):
            state = loom.checkpoint.load(argument("--load"), model=pipe, optimizer=optimizer)
            assert state["step"] == STEPS, state
            torch.save(pipe.state_dict(), f"{out}.loaded.rank{job.rank}")
            pipe.close()
            return
        steps = None
        if argument("--steps") and i == 0:
            steps = loom.profile.Steps(argument("--steps"), model=pipe, optimizer=optimizer,
                                       config={"train": {"log_every": 1}}, warmup_steps=1)
        share = GLOBAL_BATCH // pipe.replicas
        for x, y in (steps.loop if steps else iter)(batches()):
            rows = slice(pipe.replica * share, (pipe.replica + 1) * share)
            loss = pipe.step(x[rows], y[rows]) if pipe.is_first else pipe.step()
            optimizer.step()
            if steps:
                steps.record(loss=loss)  # the samples: the pipeline's step, as Steps counts them
        if steps:
            steps.close()
        if argument("--checkpoint") and i == 0:
            loom.checkpoint.save(argument("--checkpoint"), STEPS, model=pipe, optimizer=optimizer)
        pipe.close()
        torch.save(pipe.state_dict(), f"{out}.{schedule}.rank{job.rank}")


def argument(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


if __name__ == "__main__":
    main()
