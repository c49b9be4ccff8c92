"""`loom.checkpoint`: Loom's checkpoints for a script's own model, optimizer and loader.

    loom.checkpoint.save("runs/mine/checkpoints", step, model=model, optimizer=optimizer,
                         loader=loader, extra={"best_loss": best})
    state = loom.checkpoint.load("runs/mine/checkpoints", model=model, optimizer=optimizer,
                                 loader=loader)   # {"step": ..., "epoch": ..., "extra": {...}}

A checkpoint is what `loom train` writes: a folder step-<N> (zero-padded) holding model.safetensors (the
parameters and buffers under the module's own names, readable by any safetensors reader, loading
runs no code), state.safetensors (the optimizer's state as optimizer/<name>.<field> and the
random generator) and manifest.json; committed atomically (written aside, fsync'ed, renamed,
then `latest` moved), so a crash or Ctrl-C during a save leaves the previous one intact.

`save` returns on every rank once the checkpoint is committed (as torch DCP's save does), so a
`load` right after it finds it on every rank. With `blocking=False` it returns once the state is
copied into host buffers, and a thread writes and commits the copy while the script trains on:

    pending = loom.checkpoint.save(..., blocking=False)   # a PendingSave
    ...                                                   # the next steps
    pending.wait()                                        # committed, on every rank
"""

import atexit
import contextlib
import json
import os
import time
import warnings

import torch

from . import _loom, _placement, distributed

__all__ = ["PendingSave", "load", "save"]

# Background saves: each directory's writer (its host buffers serve all its checkpoints, so they
# are kept until the process ends) and its checkpoint not yet waited for, made by the first
# save(..., blocking=False); the process waits for the write in flight before it exits.
_writers = {}
_pending = {}
_waits_at_exit = False


def _kind_of(optimizer):
    # torch.optim's own classes, by the names Loom's optimizer.name gives them (SGD: "sgd").
    name = type(optimizer).__name__
    kind = name.lower()
    if kind in _loom.optimizer_kinds() and type(optimizer) is getattr(torch.optim, name, None):
        return kind
    kinds = ", ".join(_loom.optimizer_kinds())
    raise _loom.ConfigError(f"optimizer: loom.checkpoint keeps the state of torch.optim's "
                            f"{kinds}, not {type(optimizer).__module__}.{name}",
                            key="optimizer", value=name, allowed=kinds)


def _parameter_states(optimizer, named_parameters):
    # [(name, parameter, [(field, tensor)])] for the parameters the optimizer keeps state of.
    # Under ZeRO the optimizer steps the shards, named zero.bucket<b>.rank<r>.
    names = {id(p): name for name, p in named_parameters}
    state = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            fields = optimizer.state.get(p)
            if not fields:
                continue
            name = names.get(id(p))
            if name is None:
                raise _loom.ConfigError("optimizer: it holds a parameter the model does not",
                                        key="optimizer", problem="foreign_parameter")
            state.append((name, p, [(field, value if isinstance(value, torch.Tensor)
                                     else torch.tensor(value))
                                    for field, value in fields.items() if value is not None]))
    return state


def _optimizer_state(optimizer, kind, named_parameters):
    state = _parameter_states(optimizer, named_parameters)
    return _loom.name_optimizer_state(kind, [(name, fields) for name, _, fields in state])


def save(directory, step, *, model, optimizer=None, loader=None, extra=None, epoch=None,
         samples=0, keep=3, job=None, blocking=True):
    """Commits a checkpoint of `model` (a torch.nn.Module, Loom's DataParallel /
    ParameterServers / TensorParallel around one, or a loom.pipeline.Pipeline) at optimizer step
    `step` into `directory`, keeping the newest `keep`. In a job of several ranks call it on
    every rank: the ranks hold the same replica and rank 0 writes (a Pipeline's stages are
    gathered there first; under ZeRO every rank's optimizer shards, and ZeRO-3's parameters, made
    whole on every rank for the length of the gather; under TensorParallel, or given the module
    it split, each cut tensor and its optimizer state are gathered from the group's slices, one
    at a time, and rank 0 keeps them whole), so the checkpoint holds the whole model and its
    optimizer state under the model's own names, as one process would write it. It returns on
    every rank once the checkpoint is committed: the checkpoint's path on rank 0, None on the
    others. When the write fails, rank 0 raises its error and the others loom.Error. `extra` is
    any JSON value of the script's.

    With `loader`, the checkpoint's position (epoch, and batch within it) is the loader's, as
    `loom train` records it, so `loom train --resume` can go on from it; `epoch` (default 0
    without a loader) says otherwise. `samples` is the samples trained so far, all ranks'.

    `blocking=False` returns a PendingSave as soon as rank 0 has copied the state into host
    buffers (kept for the directory's next checkpoints); a thread writes and commits it while
    training goes on. Its wait() (on every rank) is what save returns otherwise. A save into the
    same directory waits for the previous one first, and the process waits for the write in
    flight before it exits. An error in the copy is raised by wait(), once the ranks agreed, so
    that their collectives stay in step.
    """
    began = time.perf_counter()
    if job is None and distributed.is_initialized():
        job = distributed.current()
    key = os.path.abspath(os.fspath(directory))
    previous = _pending.pop(key, None)
    if previous is not None:
        previous.wait()  # a checkpoint waits for the previous one to commit
    if blocking:
        failure = path = None
        try:
            written = _written(step, model, optimizer, loader, extra, epoch, samples, job)
            if written is not None:
                path = _loom.save_checkpoint(str(directory), int(keep), *written)
        except Exception as e:  # every rank hears of it before it is raised
            failure = e
        _agree(job, step, failure is not None)
        if failure is not None:
            raise failure
        return path
    writer = failure = None
    try:
        written = _written(step, model, optimizer, loader, extra, epoch, samples, job)
        if written is not None:
            writer = _writers.get((key, keep))
            if writer is None:
                writer = _writers[(key, keep)] = _loom.CheckpointWriter(str(directory), int(keep))
            writer.start(*written)
            _wait_at_exit()
    except Exception as e:  # raised by wait(), where every rank agrees on this checkpoint
        writer, failure = None, e
    pending = PendingSave(job, int(step), writer, failure)
    pending.blocked_seconds = time.perf_counter() - began
    _pending[key] = pending
    return pending


class PendingSave:
    """A checkpoint that save(..., blocking=False) is writing in the background.

    `step`; `blocked_seconds`, the time save() held the caller (a wait for the previous
    checkpoint, the gather, the copy); after wait(), `background_seconds`, the time the write
    and commit took on the writer's thread (rank 0; None on the others).
    """

    def __init__(self, job, step, writer, failure=None):
        self.step = step
        self.blocked_seconds = 0.0
        self.background_seconds = None
        self._job = job
        self._writer = writer  # on the rank that writes
        self._failure = failure  # the copy failed: raised by wait() once the ranks agreed
        self._outcome = (None, str(failure)) if failure else None  # (path, error) once ended
        self._agreed = False

    def done(self):
        """Whether this rank's part has ended: the write, on the rank that writes (the others
        have none in flight)."""
        return self._writer is None or self._outcome is not None or not self._writer.running

    def wait(self):
        """Waits until the checkpoint is committed; call it on every rank, as save. Returns
        the checkpoint's path on rank 0 and None on the others; raises loom.Error when it could
        not be committed (the previous checkpoint stands)."""
        self._finish_here()
        path, error = self._outcome
        if not self._agreed:
            self._agreed = True
            _agree(self._job, self.step, bool(error))
        if self._failure is not None:
            raise self._failure
        if error:
            raise _loom.Error(error)
        return path

    def _finish_here(self):
        # This rank's write ended (no collective: the process's exit waits here too).
        if self._outcome is not None:
            return
        if self._writer is None:
            self._outcome = (None, "")
            return
        result = self._writer.wait()
        self._outcome = (result["path"] or None, result["error"])
        self.background_seconds = result["background_seconds"]

    def __repr__(self):
        state = "committed" if self._outcome and not self._outcome[1] else (
            "failed" if self._outcome else "pending")
        return f"PendingSave(step {self.step}: {state})"


def _written(step, model, optimizer, loader, extra, epoch, samples, job):
    # The checkpoint's fields on the rank that writes it (for save_checkpoint and
    # CheckpointWriter.start, after the directory); None on the others. The parts `model` was
    # parted by are undone outermost first (as they were applied innermost first): data's ZeRO
    # shards back under the parameters' names on each slice's first replica, the tensor group's
    # slices put together there, a pipeline's stages gathered on its first rank. Collective where
    # a part is: ZeRO-3's parameters whole on every rank for the read, every rank's optimizer
    # shards to its first replica, each cut tensor from its group's slices, one at a time.
    parts, module = _placement.parts_of(model)
    writes = job is None or job.rank == 0
    if not writes and not any(part.collective for part in parts):
        return None
    kind = "" if optimizer is None else _kind_of(optimizer)  # before any collective
    with torch.no_grad():
        tensors, state = _placement.read(module, optimizer, kind, parts, writes, _optimizer_state)
        gathered = _placement.gather(parts, tensors, state, kind, writes)
    if gathered is None or not writes:
        return None
    tensors, state = gathered
    layout = next((p.manifest() for p in parts if p.manifest()), None) or \
        _loom.layout_manifest(job.layout if job is not None else None)
    position = None if loader is None else loader.state_dict()
    step_in_epoch = 0 if position is None else position["step"]
    if epoch is None:
        epoch = 0 if position is None else position["epoch"]
    return (int(step), int(epoch), int(step_in_epoch), int(samples), tensors, state, kind,
            position, "" if extra is None else json.dumps(extra), layout)


def _agree(job, step, failed_here):
    # Every training rank returns once the rank that writes is done; the others raise when it
    # failed.
    if job is not None:
        _loom.agree_on_checkpoint(job, int(step), failed_here)


def _wait_at_exit():
    global _waits_at_exit
    if not _waits_at_exit:
        _waits_at_exit = True
        atexit.register(_finish_pending)


def _finish_pending():
    # The process ends: its writes in flight commit first (no collective: the other ranks may
    # be gone).
    for pending in list(_pending.values()):
        pending._finish_here()
        path, error = pending._outcome
        if error and not pending._agreed:  # wait() raised it already
            warnings.warn(f"loom.checkpoint: {error}", RuntimeWarning, stacklevel=1)
    _pending.clear()


def load(directory, *, model, optimizer=None, loader=None):
    """Restores the newest committed checkpoint of `directory` into `model` (by name: every
    parameter and buffer must be there with its shape), `optimizer` and `loader`, and the random
    generator; returns {"path", "step", "epoch", "samples", "extra"}. Raises loom.DataError naming
    the tensor or field that is missing or does not fit.

    Into Loom's DataParallel under ZeRO, call it on every rank (ZeRO-3 gathers the parameters
    to write into them); each rank keeps its shards of the optimizer state. Into a
    TensorParallel (or the module it split), each rank reads the whole tensors and keeps its
    slices of the cut ones and of their optimizer state (no collective); a cut tensor must be
    there whole (loom.DataError otherwise), so a checkpoint of one process, or of any number of
    tensor ranks, loads.

    After save(..., blocking=False) into `directory`, call the PendingSave's wait() first (on
    every rank): until then its checkpoint may not be committed. This rank's own write in
    flight there is waited for here, so that its pruning cannot remove what is being read.
    """
    pending = _pending.get(os.path.abspath(os.fspath(directory)))
    if pending is not None:
        pending._finish_here()  # no collective: load may be called on some ranks only
    data = _loom.load_checkpoint(str(directory))
    parts, module = _placement.parts_of(model)
    saved = data["model"]
    shapes = {}  # the parameters' shapes as this rank holds them (ZeRO-3's whole)
    with torch.no_grad(), contextlib.ExitStack() as holding:
        for part in parts:
            holding.enter_context(part.whole_parameters())
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if name not in saved:
                raise _loom.DataError(f"checkpoint '{data['path']}': no tensor '{name}'",
                                      path=data["path"], tensor=name, problem="missing")
            shapes[name] = list(tensor.shape)
            _check_shape(data, name, saved[name], shapes[name], name, parts)
            tensor.copy_(_placement.cut(parts, name, saved[name]))
    if optimizer is not None:
        _restore_optimizer(optimizer, module, parts, shapes, data)
    if loader is not None and data["loader"] is not None:
        loader.load_state_dict(data["loader"])
    torch.set_rng_state(data["rng"])
    extra = json.loads(data["extra_json"]) if data["extra_json"] else None
    return {"path": data["path"], "step": data["step"], "epoch": data["epoch"],
            "samples": data["samples"], "extra": extra}


def _check_shape(data, tensor, value, held, name, parts, what="tensor"):
    # `value` (read), the checkpoint's `tensor`, fits a tensor of shape `held` (the model's): that
    # shape, or the shape of the whole of which `held` is this rank's part.
    what = f"{what} '{tensor}'"
    shape = _placement.whole_shape(parts, name, held)
    if list(value.shape) == shape:
        return
    slice_ = "" if shape == held else f" (whole; this rank holds {held})"
    raise _loom.DataError(f"checkpoint '{data['path']}': {what} has shape {list(value.shape)}, "
                          f"the model's is {shape}{slice_}", path=data["path"], tensor=tensor,
                          problem="shape", value=list(value.shape), expected=shape)


def _restore_optimizer(optimizer, module, parts, shapes, data):
    # The state cut as the parts were applied, innermost first: the tensor group's slices of the
    # cut parameters' state, then data's ZeRO shards of those.
    kind = _kind_of(optimizer)
    if data["optimizer_kind"] != kind:
        raise _loom.ConfigError(f"optimizer: the checkpoint '{data['path']}' holds "
                                f"{data['optimizer_kind']} state, the optimizer is {kind}",
                                key="optimizer", value=kind, expected=data["optimizer_kind"])
    fields = _loom.split_optimizer_state(kind, list(data["optimizer"].items()))
    for name, values in fields:
        for field, value in values:
            if name in shapes and _placement.cut_like_parameter(field, value):
                _check_shape(data, f"{name}.{field}", value, shapes[name], name, parts,
                             what="optimizer state")
    fields = dict(_placement.cut_state(parts, fields, kind))
    for name, p in _placement.optimizer_names(parts, module):
        if name not in fields:
            continue
        state = {}
        for field, value in fields[name]:
            # torch's Adam keeps its step count as a float tensor
            state[field] = (torch.tensor(float(value)) if field == "step" else
                            value.to(dtype=p.dtype, copy=True))
        optimizer.state[p] = state
