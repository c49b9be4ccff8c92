"""`loom.parallel`: Loom's data parallelism and parameter servers for a script's own module,
loss and loop.

    job = loom.distributed.init()
    model = loom.parallel.DataParallel(MyModel())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()   # gradients are averaged over the ranks here
        model.step(optimizer)             # or optimizer.step()

Like torch's DistributedDataParallel: rank 0's parameters and buffers go to every rank at the
start, gradients are averaged in buckets whose exchange starts during backward as soon as a
bucket is full, and `no_sync()` accumulates without exchanging. The exchange is Loom's (shared
memory inside a host, TCP between hosts; parameter servers when the job has them).

ZeRO, as `loom train`'s parallel.zero (src/loom/parallel/zero_partition.h), for the same loop:

    model = loom.parallel.DataParallel(MyModel(), zero=2)
    optimizer = torch.optim.AdamW(model.optimizer_parameters())   # this rank's shards
    ...
        loss_fn(model(x), y).backward()   # each rank receives the mean of its shards only
        model.step(optimizer)             # steps the shards, then all-gathers the parameters
    model.close()                         # every rank holds the whole final parameters

The trainable parameters move into flat buckets (the tensors stay the same objects), each cut
into one shard per rank. zero=1 shards the optimizer state, 2 the gradients too, 3 the
parameters too: each block module's parameters are gathered by a forward pre-hook just before it
runs and freed by its forward hook after (again in its backward), the parameters in no block
around the whole forward; in between `model.module`'s trainable parameters hold no memory, so
read them only after close() (or through loom.checkpoint).

Tensor parallelism for a script's own transformer blocks, by a plan in the spirit of torch's
parallelize_module (python/loom/tensor_parallel.py; Loom's cuts, models/tensor_parallel.h):

    torch.manual_seed(0)                               # the same model on every rank
    model = loom.parallel.TensorParallel(MyTransformer(), {
        "blocks.*.attn.qkv": loom.parallel.ColwiseParallel(sections=3),   # [q | k | v]
        "blocks.*.attn.proj": "rowwise",
        "blocks.*.mlp.fc": "colwise",
        "blocks.*.mlp.out": "rowwise",
    }, divide={"blocks.*.attn.n_head"})               # n_head //= the tensor ranks
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)   # steps this rank's slices
    ...                                                # every rank gets the same batch
    state = model.full_state_dict()                    # whole tensors, the module's names

A column-parallel linear keeps this rank's rows of its weight and bias, its input entering the
split (gradient summed over the group backward); a row-parallel one keeps its columns, its
partial products summed over the group forward, then the whole bias added.

The dimensions apply in order, as torchtitan's apply_tp then apply_ddp/apply_fsdp: a
DataParallel around a TensorParallel (or around the module it split) replicates the slices over
the ranks that hold the same ones. With 4 ranks, tensor=2 makes two tensor groups (ranks 0-1 and
2-3) and two replicas of each slice (ranks 0 and 2, 1 and 3), with ZeRO if asked:

    tp = loom.parallel.TensorParallel(MyTransformer(), plan, divide=..., tensor=2)
    model = loom.parallel.DataParallel(tp, zero=1)
    optimizer = torch.optim.AdamW(model.optimizer_parameters())
    ...                              # each replica its own batch, its tensor group the same one
    model.step(optimizer)

loom.checkpoint saves and loads it as any other layout: whole tensors under the module's names.
"""

import contextlib

import torch

from . import _loom, _native, _placement, distributed, tensor_parallel
from .tensor_parallel import ColwiseParallel, RowwiseParallel, TensorParallel

__all__ = ["ColwiseParallel", "DataParallel", "ParameterServers", "RowwiseParallel",
           "TensorParallel"]


class DataParallel(torch.nn.Module):
    """Wraps `module` so that its gradients are averaged over the job's training ranks.

    Args:
        module: any torch.nn.Module; its forward is called as it is.
        job: the loom.distributed Job (default: the one init() joined).
        bucket_mb, first_bucket_mb: bucket sizes in MiB (parallel.bucket_cap_mb,
            parallel.first_bucket_mb).
        find_unused_parameters: tolerate parameters that get no gradient in a backward (their
            gradient counts as zero). Off, such a backward raises loom.Error naming them.
        broadcast_buffers: copy rank 0's buffers (BatchNorm statistics) before every forward.
        compression: "none", "bf16" or "fp16": the type buckets travel in.
        zero: ZeRO's stage, as `loom train`'s parallel.zero: 0 nothing sharded; 1 the
            optimizer state; 2 and the gradients; 3 and the parameters. Under 1-3 build the
            optimizer over `model.optimizer_parameters()` and step it with
            `model.step(optimizer)`. With one rank nothing is sharded.
        blocks: zero=3: the modules whose parameters are gathered just before each runs and
            freed after (default: the children with parameters of an nn.Sequential, or of the
            module's first nn.ModuleList).
        zero3_keep: zero=3: "none", "last" or "all" blocks keep their gathered parameters
            from forward until their backward (parallel.zero3_keep).
    """

    def __init__(self, module, *, job=None, bucket_mb=25.0, first_bucket_mb=1.0,
                 find_unused_parameters=False, broadcast_buffers=True, compression="none",
                 zero=0, blocks=None, zero3_keep="last"):
        super().__init__()
        if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
            raise ValueError(f"zero: {zero!r} is not a ZeRO stage: 0 (nothing sharded), 1 "
                             "(optimizer state), 2 (and gradients) or 3 (and parameters)")
        if blocks is not None and zero != 3:
            raise ValueError("blocks: only zero=3 gathers the parameters a block at a time")
        self.module = module
        # The dimensions apply in order, tensor before data: a module a TensorParallel split is
        # replicated over the ranks that hold the same slices, on its tensor group's mesh, under
        # the module's own names (not its wrapper's).
        split = tensor_parallel.split_by(module)
        inner = _own_module(module)
        block_modules = _blocks_of(inner, blocks) if zero == 3 else []
        self._sync = _native.attach(self, _loom.ReplicaSync(
            job if job is not None else distributed.current(),
            list(inner.named_parameters()), list(inner.named_buffers()),
            float(first_bucket_mb), float(bucket_mb), bool(find_unused_parameters),
            bool(broadcast_buffers), str(compression), zero,
            [(name, list(m.parameters())) for name, m in block_modules], str(zero3_keep),
            parted=None if split is None else split.layout,
            index=0 if split is None else tensor_parallel.next_group_index()))
        _native.wraps(self, module)  # loom.profile.Steps(model=model.module) accounts this
        # ZeRO-3: each block's forward gathers its parameters first and frees them after; the
        # parameters in no block are block 0, gathered around the whole forward.
        self._outer = self._sync.zero_stage == 3 and self._sync.has_outer_block
        self._hooks = []
        if self._sync.zero_stage == 3:
            first = 1 if self._outer else 0
            for b, (_, m) in enumerate(block_modules, start=first):
                self._hooks.append(m.register_forward_pre_hook(
                    lambda _m, _inputs, b=b: self._sync.before_block(b)))
                self._hooks.append(m.register_forward_hook(
                    lambda _m, _inputs, output, b=b: self._sync.after_block(
                        b, _tensors_in(output))))

    def _placement(self):
        # loom.checkpoint's view of the shards (loom/_placement.py); without ZeRO every rank
        # holds the whole module.
        if self._sync.zero_stage:
            return _placement.ZeroShards(self, self._sync)
        return _placement.Part()

    @property
    def zero_stage(self):
        """The ZeRO stage in force: `zero`, or 0 in a job of one rank."""
        return self._sync.zero_stage

    def optimizer_parameters(self):
        """What the optimizer steps: under ZeRO this rank's shards of the parameters (flat
        tensors, one per bucket), else the module's parameters."""
        return [t for _, t in self.named_optimizer_parameters()]

    def named_optimizer_parameters(self):
        """optimizer_parameters() with names: the shards are zero.bucket<b>.rank<r>."""
        shards = self._sync.shards()
        if shards:
            return shards
        return list(_own_module(self.module).named_parameters())

    def forward(self, *args, **kwargs):
        self._sync.prepare()
        if not self._outer:
            return self.module(*args, **kwargs)
        self._sync.before_block(0)
        output = self.module(*args, **kwargs)
        self._sync.after_block(0, _tensors_in(output))
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside only accumulate gradients; the next one outside exchanges the
        sum (gradient accumulation)."""
        self._sync.enter_no_sync()
        try:
            yield
        finally:
            self._sync.exit_no_sync()

    def step(self, optimizer):
        """The optimizer step (what optimizer.step() does without ZeRO; parameter servers that
        keep the parameters push and pull around it). Under ZeRO-1/2 every rank's stepped shards
        then go to every rank's parameters, and the parameters' gradients are cleared."""
        if self._sync.zero_stage:
            _check_steps_shards(optimizer, self.optimizer_parameters(), self._sync.zero_stage)
        self._sync.step(float(optimizer.param_groups[0]["lr"]), optimizer.step)

    def close(self):
        """After the last step: every rank ends with the same, whole parameters (ZeRO-3 gathers
        them), and parameter servers hear that this rank is done. The module stays usable on
        its own."""
        self._sync.close()
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._outer = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()

    def sync_buffers(self):
        """Copies rank 0's floating-point buffers to every rank (before an evaluation)."""
        self._sync.sync_buffers()

    def exchange_stats(self):
        """The last exchanged step: buckets, bytes, seconds in flight and exposed, overlap."""
        return self._sync.last_stats()

    def extra_repr(self):
        return self._sync.describe()


def _tensors_in(output):
    """The tensors of a module's output: itself, or those inside its tuples, lists and mappings
    (a transformers ModelOutput is one), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in _tensors_in(item)]
    return []


def _own_module(module):
    # The module under its own names: inside a TensorParallel wrapper, the module it split.
    split = tensor_parallel.split_by(module)
    return module if split is None else split.module


def _blocks_of(module, blocks):
    # ZeRO-3's blocks as (name, module), in forward order.
    names = {id(m): name for name, m in module.named_modules()}
    if blocks is None:
        holder = module if isinstance(module, torch.nn.Sequential) else next(
            (m for m in module.modules() if isinstance(m, torch.nn.ModuleList)), None)
        if holder is None:
            raise ValueError("blocks: zero=3 gathers the parameters a block at a time; pass "
                             "blocks=[...] (the modules in forward order), as the module is no "
                             "nn.Sequential and holds no nn.ModuleList")
        blocks = [m for m in holder.children() if any(True for _ in m.parameters())]
    out = []
    for m in blocks:
        if id(m) not in names:
            raise ValueError(f"blocks: {type(m).__name__} is not a submodule of the module")
        out.append((names[id(m)] or type(m).__name__, m))
    return out


def _check_steps_shards(optimizer, shards, stage):
    # Stepping the whole parameters under ZeRO would silently train on unreduced gradients.
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if stepped != {id(p) for p in shards}:
        raise _loom.ConfigError(
            f"optimizer: under zero={stage} it must step model.optimizer_parameters() (this "
            "rank's shards), e.g. torch.optim.AdamW(model.optimizer_parameters())")


class ParameterServers(DataParallel):
    """Wraps `module` for a job with parameter servers (`loom launch --nproc-per-node N
    --servers K -- python3 train.py`): its gradients go, cut into parts spread evenly over the
    servers, to the job's K server ranks as backward fills them, and the means come back.

    How the servers work comes from the job's configuration, not from here, because the server
    ranks begin serving inside loom.distributed.init(): `parallel.ps.mode` sync (summation, as
    all-reduce), async or ssp (with `parallel.ps.staleness`: the servers keep the parameters, and
    each worker pushes its optimizer's move and pulls theirs at its own pace). Call step(optimizer)
    instead of optimizer.step(), and close() after the last step (or use it as a context
    manager), so that the servers know this worker is done. Other arguments as DataParallel.
    """

    def __init__(self, module, *, job=None, **kwargs):
        job = job if job is not None else distributed.current()
        if not job.layout.servers:
            raise _loom.ConfigError(
                "parallel.mode: this job has no parameter servers; start it with "
                "`loom launch --nproc-per-node N --servers K -- python3 ...`")
        super().__init__(module, job=job, **kwargs)
