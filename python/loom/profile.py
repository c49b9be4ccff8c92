"""`loom.profile.Steps`: `loom train`'s step accounting for a script's own loop.

    steps = loom.profile.Steps("runs/mine", loader=loader, model=model, optimizer=optimizer)
    for images, labels in steps.loop(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        steps.record(loss=loss)
    steps.close()

Every step's wall time is split into the phases `loom train` accounts (data_wait, h2d, forward,
backward, comm_exposed, tensor_comm, bubble, optimizer, other), each instant counted once:
- data_wait: the loop waiting for `loop()`'s next batch;
- forward and backward: from hooks on `model`: forward from its forward's start, through the
  loss, to where autograd reaches its outputs; backward from there until autograd is done. Or
  from `with steps.phase("forward"):` blocks in the loop;
- comm_exposed: a loom.parallel.DataParallel `model` waiting for its gradient exchange, or a
  loom.pipeline.Pipeline moving activations and gradients between stages;
- tensor_comm: a loom.parallel.TensorParallel `model`'s all-reduces inside forward and backward
  (as `loom train`'s parallel.tensor), or `with steps.phase("tensor_comm"):` blocks;
- bubble: a Pipeline's rank waiting for a neighbouring stage to compute;
- optimizer: `optimizer.step()` (the instance's step is wrapped until close());
- other: the rest of the loop's body.

`model` may be a loom.parallel wrapper (DataParallel, ZeRO's included, ParameterServers,
TensorParallel), a loom.pipeline.Pipeline, or the module such a wrapper holds (its `.module`, a
Pipeline's Sequential): the wrapper is accounted either way. Each sample is counted once: a
step's samples are one replica's (this rank's batch; the batch a tensor group's ranks share; a
pipeline's step) times the job's replicas, as the wrapper lays the ranks out.

The run's folder gets what `loom train` writes there: config.yaml, metrics.jsonl every
train.log_every steps, TensorBoard events (train.tensorboard), a Chrome trace (profile.trace)
and, from close(), summary.json with the advisor's findings. So `loom report DIR` renders the run
and the advisor names what bounds it (an input-bound loop, a reference BLAS, ...). In a job of
several ranks, rank 0 writes the files and close() is collective.
"""

import contextlib
import math

import torch

from . import _config, _loom, _native, distributed, pipeline, tensor_parallel

__all__ = ["Steps"]


class Steps:
    """Accounts a script's training steps by phase into `out_dir`, as `loom train` does.

    Args:
        out_dir: the run's folder (made if missing).
        loader: the loom.data.Loader the loop reads (for the input pipeline's counts and
            trace); None when batches come from elsewhere.
        model: a torch.nn.Module whose forward and backward are accounted by hooks: a
            loom.parallel wrapper or the module it wraps (DataParallel's exchange adds
            comm_exposed, TensorParallel's collectives tensor_comm); or a loom.pipeline.Pipeline
            (or its Sequential), whose schedule reports its forward, backward, bubble and
            transfers; None to mark them with phase().
        optimizer: a torch.optim.Optimizer whose step() is accounted as the optimizer phase.
        config: a `loom train` configuration (dict, YAML text or path) for train.log_every,
            train.tensorboard and profile.* (the trace window); None for the defaults.
        overrides: "key=value" strings on top of `config`.
        name: what the summary and report call the model (default: its class name).
        precision: what the summary reports the script trains in ("fp32", "bf16", ...).
        warmup_steps: the first steps, left out of summary.json's rates and step shares
            (threads starting, allocator and kernel warm-up).
        tokens_per_sample: a language model's tokens per sample, for tokens/s in metrics.jsonl,
            TensorBoard and summary.json (default: a Loom loader of token windows says; 0 for
            none).
    """

    def __init__(self, out_dir, *, loader=None, model=None, optimizer=None, config=None,
                 overrides=(), name=None, precision="fp32", warmup_steps=5,
                 tokens_per_sample=0):
        # The wrapper that `model` is or that holds it: what is accounted, whichever was given.
        self._wrapper = _native.wrapper_of(model) if model is not None else None
        self._optimizer = optimizer
        self._hooks = []
        self._step_open = False
        self._samples = None
        self._recorded_samples = False  # record(samples=) said this step's count
        self._loss = math.nan
        self._epoch = 0
        self._loops = 0  # loop() calls: the epoch of batches that do not say theirs
        job = distributed.current() if distributed.is_initialized() else None
        if name is None:
            held = self._wrapper if self._wrapper is not None else model
            inner = getattr(held, "module", held)
            name = type(inner).__name__ if inner is not None else "python"
        # Loom's wrappers report their own phases: DataParallel its exchange's exposed waits,
        # TensorParallel its collectives, a Pipeline every phase of its schedule (it has no
        # forward of its own to hook). Each also says the layout it trains under: a tensor
        # group's or a pipeline's mesh (their ranks share a replica's samples), DataParallel's
        # ZeRO stage; None: the job's own layout.
        self._native_model = _native.of(self._wrapper)
        self._accounting = _loom.StepAccounting(
            _config.load(config, overrides), str(out_dir), _native.of(loader), job,
            getattr(self._native_model, "layout", None), str(name),
            int(_parameters_of(self._wrapper, model)), str(precision), int(warmup_steps),
            int(tokens_per_sample))
        if self._native_model is not None:
            self._native_model.account_in(self._accounting)
        if isinstance(model, torch.nn.Module) and not isinstance(self._wrapper,
                                                                   pipeline.Pipeline):
            self._hook_model(model)
        if optimizer is not None:
            self._hook_optimizer(optimizer)

    def loop(self, batches):
        """Yields `batches`' items, each one training step: the wait for it is data_wait, and
        the step ends when the loop asks for the next one (or when the iteration stops)."""
        iterator = iter(batches)
        self._loops += 1
        while True:
            self._end_step()
            self._accounting.begin_step()
            self._accounting.enter("data_wait")
            self._epoch = getattr(batches, "epoch", self._loops - 1)  # a Loader's next batch's
            try:
                batch = next(iterator)
            except StopIteration:
                return  # the next begin_step starts the clock afresh
            self._accounting.enter("other")
            self._step_open = True
            self._samples = _batch_size(batch)
            try:
                yield batch
            except GeneratorExit:
                self._end_step()
                raise

    @contextlib.contextmanager
    def phase(self, name):
        """Charges the block's time to phase `name` (data_wait, h2d, forward, backward,
        comm_exposed, tensor_comm, bubble, optimizer or other); 'other' after it."""
        self._accounting.enter(name)
        try:
            yield
        finally:
            self._accounting.enter("other")

    def record(self, *, loss=None, samples=None):
        """This step's loss (a number or a one-element tensor; read when the step ends) and its
        replica's samples (default: the first dimension of the batch's first tensor; with a
        Pipeline, its step's). Only inside `for batch in steps.loop(batches):`, where a step is
        open; elsewhere raises loom.Error (nothing would count it)."""
        if not self._step_open:
            raise _loom.Error(
                "loom.profile.Steps.record(): no step is open, so this record would be lost; "
                "call it inside `for batch in steps.loop(batches):` (each batch the loop yields "
                "is one step)")
        if loss is not None:
            self._loss = loss
        if samples is not None:
            self._samples = int(samples)
            self._recorded_samples = True

    @property
    def steps(self):
        """Steps accounted so far."""
        return self._accounting.steps

    def close(self):
        """Ends the last step, writes summary.json (rank 0; collective over the job's training
        ranks), removes the hooks, and returns {"steps", "samples_per_second", "findings"}."""
        self._end_step()
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        if hasattr(self._native_model, "stop_accounting"):
            self._native_model.stop_accounting()
        if self._optimizer is not None and "step" in vars(self._optimizer):
            del self._optimizer.step  # the class's own again
            self._optimizer = None
        return self._accounting.finish()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()

    def _end_step(self):
        if not self._step_open:
            return
        self._step_open = False
        loss = self._loss
        if isinstance(loss, torch.Tensor):
            loss = loss.detach().float().item()
        self._loss = math.nan
        if isinstance(self._wrapper, pipeline.Pipeline) and not self._recorded_samples:
            samples = self._wrapper.last_samples  # the pipeline's step, shared by its ranks
        else:
            samples = self._samples or 0
        # One replica's: the accounting counts the layout's replicas.
        self._recorded_samples = False
        lr = float(self._optimizer.param_groups[0]["lr"]) if self._optimizer is not None else 0.0
        self._accounting.end_step(samples, float(loss), lr, int(self._epoch))

    def _hook_model(self, model):
        accounting = self._accounting

        def backward_done():
            accounting.enter("other")

        def before_forward(module, inputs):
            accounting.enter("forward")

        def after_forward(module, inputs, output):
            # The loss the script computes from the outputs is forward too (as in loom train).
            # Backward begins where autograd first reaches one of the outputs (whichever the
            # loss uses), and ends when the engine has run everything it queued.
            reached = [False]

            def output_reached(grad):
                if not reached[0]:
                    reached[0] = True
                    accounting.enter("backward")
                    torch.autograd.Variable._execution_engine.queue_callback(backward_done)
                return grad

            for tensor in _tensors(output):
                if tensor.requires_grad:
                    tensor.register_hook(output_reached)

        self._hooks.append(model.register_forward_pre_hook(before_forward))
        self._hooks.append(model.register_forward_hook(after_forward))

    def _hook_optimizer(self, optimizer):
        accounting = self._accounting
        step = optimizer.step  # the bound method of the optimizer's class

        def accounted_step(*args, **kwargs):
            accounting.enter("optimizer")
            try:
                return step(*args, **kwargs)
            finally:
                accounting.enter("other")

        optimizer.step = accounted_step


def _parameters_of(wrapper, model):
    # The model's parameters, whole: a tensor group's ranks hold slices of the cut ones.
    if model is None:
        return 0
    if isinstance(wrapper, tensor_parallel.TensorParallel):
        return sum(math.prod(wrapper.whole_shape(name, p))
                   for name, p in wrapper.module.named_parameters())
    return sum(p.numel() for p in model.parameters())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _batch_size(batch):
    for tensor in _tensors(batch):
        if tensor.dim() > 0:
            return int(tensor.shape[0])
    return 0
