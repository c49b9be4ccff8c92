"""`loom.parallel`: Loom's data parallelism for a script's own module, loss and loop.

    job = loom.distributed.init()
    model = loom.parallel.DataParallel(MyModel())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()   # gradients are averaged over the ranks here
        optimizer.step()

Like torch's DistributedDataParallel: rank 0's parameters and buffers go to every rank at the
start, gradients are averaged in buckets whose exchange starts during backward as soon as a
bucket is full, and `no_sync()` accumulates without exchanging. The exchange is Loom's (shared
memory inside a host, Gloo between hosts; parameter servers when the job has them).
"""

import contextlib

import torch

from . import _loom, distributed

__all__ = ["DataParallel"]


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
        self._sync = _loom.ReplicaSync(
            job if job is not None else distributed.current(),
            list(module.named_parameters()), list(module.named_buffers()),
            float(first_bucket_mb), float(bucket_mb), bool(find_unused_parameters),
            bool(broadcast_buffers), str(compression))

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

    def sync_buffers(self):
        """Copies rank 0's floating-point buffers to every rank (before an evaluation)."""
        self._sync.sync_buffers()

    def exchange_stats(self):
        """The last exchanged step: buckets, bytes, seconds in flight and exposed, overlap."""
        return self._sync.last_stats()

    def extra_repr(self):
        return self._sync.describe()
