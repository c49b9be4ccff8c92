"""A user's own transformer blocks in plain PyTorch under loom.parallel.TensorParallel (run by
test_tensor_parallel.py): layer norms, a fused query/key/value linear cut per section, an
attention that reads its head count, an output projection, an MLP of two linears, no dropout.
Every rank of the tensor group reads the same batches and starts from the same seed; rank 0
saves {"state": full_state_dict(), "eval": the model's output on a fixed batch} to OUT.

    tp_blocks.py OUT [--steps N] [--load PATH] [--plan-head] [--plain]
                     [--tensor T --zero Z] [--save-at K DIR [--background]] [--resume DIR]
                     [--profile DIR [--profile-module]]

--tensor T --zero Z: tensor groups of T ranks, each a replica under loom.parallel.DataParallel
with ZeRO stage Z (its optimizer over the shards); each replica trains on its share of every
batch, so that the replicas together see what one process sees.

--load PATH loads the whole state dict in PATH (another run's OUT) into the split model before
training; --plan-head also plans the 5-class head column-parallel, which 2 ranks cannot split;
--plain trains the module unsplit, as a script without Loom's tensor parallelism would (one
process). --save-at K DIR saves a loom.checkpoint of the model and its SGD (with momentum) into
DIR after step K (--background: save(..., blocking=False), waited for after the next step);
--resume DIR loads DIR's newest checkpoint and trains on from its step to N. --profile DIR
accounts the steps with loom.profile.Steps(DIR, model=the TensorParallel) (the model, with
--plain), or with --profile-module its `.module`.
"""
import functools
import itertools
import sys

import torch

import loom

DIM, HEADS, HIDDEN, SEQUENCE, CLASSES = 16, 4, 32, 6, 5
BATCH = 8
PLAN = {"blocks.*.attn.qkv": loom.parallel.ColwiseParallel(sections=3),
        "blocks.*.attn.proj": "rowwise",
        "blocks.*.mlp.fc": "colwise",
        "blocks.*.mlp.out": "rowwise"}


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.n_head = HEADS
        self.head_dim = DIM // HEADS
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.proj = torch.nn.Linear(DIM, DIM)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * self.head_dim ** -0.5
        causal = torch.ones(s, s, dtype=torch.bool).triu(1)
        y = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, self.n_head * self.head_dim))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(DIM, HIDDEN)
        self.out = torch.nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.out(torch.nn.functional.gelu(self.fc(x)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(DIM)
        self.attn = Attention()
        self.norm2 = torch.nn.LayerNorm(DIM)
        self.mlp = Mlp()

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(8, DIM)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(2))
        self.norm = torch.nn.LayerNorm(DIM)
        self.head = torch.nn.Linear(DIM, CLASSES)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def batches(steps):
    data = torch.Generator().manual_seed(1)
    for _ in range(steps):
        yield (torch.randn(BATCH, SEQUENCE, 8, generator=data),
               torch.randint(0, CLASSES, (BATCH, SEQUENCE), generator=data))


def argument(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


def main():
    out = sys.argv[1]
    job = loom.distributed.init()
    torch.manual_seed(0)
    plain = "--plain" in sys.argv
    if plain:
        assert job.trainers == 1, "--plain runs in one process"
        model = Model()
    else:
        plan = dict(PLAN, head="colwise") if "--plan-head" in sys.argv else PLAN
        tensor = int(argument("--tensor") or job.trainers)
        model = split = loom.parallel.TensorParallel(Model(), plan, divide={"blocks.*.attn.n_head"},
                                                     tensor=tensor)
        attention = model.module.blocks[0].attn
        assert attention.n_head == HEADS // tensor
        assert list(attention.qkv.weight.shape) == [3 * DIM // tensor, DIM]
    if argument("--load"):
        model.load_full_state_dict(torch.load(argument("--load"))["state"])
    replicas, replica = 1, 0
    if argument("--zero"):
        model = loom.parallel.DataParallel(split, zero=int(argument("--zero")))
        replicas, replica = split.layout.replicas, split.layout.replica
        optimizer = torch.optim.SGD(model.optimizer_parameters(), lr=0.1, momentum=0.9)
        stepped = functools.partial(model.step, optimizer)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        stepped = optimizer.step
    start = 0
    if argument("--resume"):
        start = loom.checkpoint.load(argument("--resume"), model=model, optimizer=optimizer)["step"]
    save_at = int(argument("--save-at") or -1)
    background = "--background" in sys.argv
    pending = None  # a background save, waited for after the next step
    steps = int(argument("--steps") or 4)
    source = itertools.islice(batches(steps), start, None)
    profiled = None
    if argument("--profile"):
        accounted = model.module if "--profile-module" in sys.argv else model
        profiled = loom.profile.Steps(argument("--profile"), model=accounted, optimizer=optimizer,
                                      config={"train": {"log_every": 1}}, warmup_steps=1)
        source = profiled.loop(source)
    for step, (x, y) in enumerate(source, start + 1):
        optimizer.zero_grad()
        share = slice(replica * BATCH // replicas, (replica + 1) * BATCH // replicas)
        loss = torch.nn.functional.cross_entropy(model(x[share]).flatten(0, 1), y[share].flatten())
        loss.backward()
        stepped()
        if pending is not None:
            pending.wait()
            pending = None
        if step == save_at:
            directory = sys.argv[sys.argv.index("--save-at") + 2]
            saved = loom.checkpoint.save(directory, step, model=model, optimizer=optimizer,
                                         blocking=not background)
            pending = saved if background else None
        if profiled is not None:
            profiled.record(loss=loss)
    if profiled is not None:
        profiled.close()
    if pending is not None:
        pending.wait()
    if plain:
        state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    else:
        if model is not split:
            model.close()  # ZeRO-3's parameters whole again, in the module
            model = split
        state = split.full_state_dict()
        # The whole state loads back into the slices it came from.
        before = [p.detach().clone() for p in split.parameters()]
        split.load_full_state_dict(state)
        assert all(torch.equal(a, p) for a, p in zip(before, split.parameters()))
    with torch.no_grad():
        evaluated = model(next(batches(1))[0])
    if job.rank == 0:
        torch.save({"state": state, "eval": evaluated}, out)


if __name__ == "__main__":
    from script_errors import run_reporting_errors
    run_reporting_errors(main)
