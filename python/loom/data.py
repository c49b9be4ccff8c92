"""`loom.data.Loader`: Loom's input pipeline as a Python iterable of torch tensors.

`loom.data.Tokenizer` and `loom.data.TokenWindows` read what `loom data tokenize` writes, for a
script's own language-model loop::

    windows = loom.data.TokenWindows("data/jargon", "train", seq_len=256, seed=1,
                                     rank=job.rank, world=job.world)
    for step in range(len(windows) // batch):
        tokens = windows.batch(epoch, step, batch)      # int64 [batch, 257]
        logits = model(tokens[:, :-1])                  # targets: tokens[:, 1:]
"""

import torch

from . import _config, _loom, _native

__all__ = ["Loader", "TokenWindows", "Tokenizer"]

Tokenizer = _loom.Tokenizer
TokenWindows = _loom.TokenWindows


class Loader:
    """Batches of (images, labels) torch tensors from a `loom train` configuration's data.

    A drop-in for `torch.utils.data.DataLoader` in a training loop::

        loader = loom.data.Loader("config.yaml")
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for images, labels in loader:
                ...

    Args:
        config: the configuration of `loom train` as a dict, YAML text or a path. Only its
            `data:` section is used; every key is checked as `loom train` checks it, and a bad
            one raises loom.ConfigError naming it.
        rank, world: this process's share of every epoch, as with DistributedSampler: each of
            `world` processes reads a different part, all the same number of batches.
        device: "cpu", "cuda" or "cuda:N"; batches arrive there (from pinned memory on CUDA).
        dtype: of the normalised images: torch.float32, torch.bfloat16 or torch.float16.
        channels_last: normalised images in channels-last memory layout (same shape).
        normalize: False gives the loader's raw batches: uint8 [B, H, W, C].
        overrides: "key=value" strings applied on top of `config`, as `loom train --set`.

    Images are float [B, C, H, W], normalised with the data set's channel statistics. Labels
    are int64 [B]. With token data (`data: {source: tokens, path: DIR, seq_len: T}`, a
    `loom data tokenize` folder) a batch is (inputs, targets): int64 token ids [B, T] and the
    tokens that follow each of them [B, T]. The batches are a pure function of (seed, epoch, step): the same for any
    number of loader threads, and resumable mid-epoch with state_dict() / load_state_dict().
    Remote data workers are used when the config names them (data.remote.workers).

    A sample that cannot be read or decoded is counted and left out of its batch (or replaced,
    by data.bad_samples); the run fails only when more than data.max_bad_fraction of them are
    bad. stats() has the counts.

    Each iteration goes from where the loader stands to the end of that epoch; the loader then
    stands at the start of the next epoch. The loader's threads build batches ahead while the
    training loop runs; the GIL is released while waiting for one.
    """

    def __init__(self, config, *, rank=0, world=1, device="cpu", dtype=torch.float32,
                 channels_last=False, normalize=True, overrides=()):
        if not isinstance(dtype, torch.dtype):
            raise _loom.ConfigError(f"dtype: expected a torch.dtype, got {dtype!r}")
        self._stream = _native.attach(self, _loom.DataStream(
            _config.load(config, overrides), int(rank), int(world), str(device),
            str(dtype).replace("torch.", ""), bool(channels_last), bool(normalize)))

    def __iter__(self):
        while True:
            batch = self._stream.next()
            if batch is None:
                return
            yield batch

    def __len__(self):
        """Batches per epoch for this rank."""
        return self._stream.steps_per_epoch

    @property
    def epoch(self):
        """The epoch of the next batch."""
        return self._stream.epoch

    @property
    def step(self):
        """The position of the next batch in its epoch."""
        return self._stream.step

    def set_epoch(self, epoch):
        """Moves to the start of `epoch`, unless the loader already stands in it.

        So a loop that calls set_epoch(e) at the top of every epoch keeps a position restored
        with load_state_dict() in the middle of epoch e.
        """
        self._stream.set_epoch(int(epoch))

    def state_dict(self):
        """Where the loader stands and what fixes its sequence of batches, as a plain dict.

        Save it with the model's checkpoint; load_state_dict() on a loader of the same config
        continues with exactly the batches that would have come next.
        """
        return self._stream.state()

    def load_state_dict(self, state):
        """Continues from a state_dict(); raises loom.DataError naming what differs when it
        belongs to another sequence (seed, data set size, rank's share, batch size)."""
        self._stream.restore(dict(state))

    def stats(self):
        """What the loader has read: samples, bad samples by reason ('unreadable', 'truncated',
        'undecodable', 'too_large'), their total and fraction, substitutions, and the loader
        threads' wall and CPU time with the rates they give."""
        return self._stream.stats()

    @property
    def samples(self):
        """Samples in the data set (all ranks)."""
        return self._stream.samples

    def __repr__(self):
        return (f"loom.data.Loader({len(self)} batches per epoch, epoch {self.epoch}, "
                f"step {self.step})")
