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
memory inside a host, Gloo between hosts; parameter servers when the job has them).
"""

import contextlib

import torch

from . import _loom, _native, distributed

__all__ = ["DataParallel", "ParameterServers"]


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
    """

    def __init__(self, module, *, job=None, bucket_mb=25.0, first_bucket_mb=1.0,
                 find_unused_parameters=False, broadcast_buffers=True, compression="none"):
        super().__init__()
        self.module = module
        self._sync = _native.attach(self, _loom.ReplicaSync(
            job if job is not None else distributed.current(),
            list(module.named_parameters()), list(module.named_buffers()),
            float(first_bucket_mb), float(bucket_mb), bool(find_unused_parameters),
            bool(broadcast_buffers), str(compression)))

    def forward(self, *args, **kwargs):
        self._sync.prepare()
        return self.module(*args, **kwargs)

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
        """The optimizer step (what optimizer.step() does here; parameter servers that keep the
        parameters push and pull around it)."""
        self._sync.step(float(optimizer.param_groups[0]["lr"]), optimizer.step)

    def close(self):
        """After the last step: every rank ends with the same parameters, and parameter servers
        hear that this rank is done. The module stays usable on its own."""
        self._sync.close()

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
        if job.mode is not distributed.Mode.PARAMETER_SERVERS:
            raise _loom.ConfigError(
                "parallel.mode: this job has no parameter servers; start it with "
                "`loom launch --nproc-per-node N --servers K -- python3 ...`")
        super().__init__(module, job=job, **kwargs)
