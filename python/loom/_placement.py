"""Where a wrapped module's tensors live, for loom.checkpoint to gather them whole and cut them
again without knowing the wrappers: the Python side of the C++ pieces' placements
(src/loom/parallel/layout_piece.h).

Each of the package's wrappers says how it parted the module it wraps through a `_placement()`
method: a TensorParallel cut some tensors into slices over its tensor group (Shard), a
DataParallel under ZeRO cut the optimizer state (and at 3 the parameters) into shards over the
replicas, a Pipeline put each stage's tensors on its ranks. parts_of(model) lists those parts
outermost first, the order a gather undoes them in (they were applied innermost first: tensor,
then data), with the module whose own names the checkpoint holds. Every part answers the same
questions, so loom.checkpoint writes one gather and one cut for every layout.
"""

import contextlib

from . import _loom

# The module attribute that names the TensorParallel which split it in place (set by
# tensor_parallel.py), so that a module kept without its wrapper still gathers whole.
SPLIT_BY = "_loom_tensor_parallel"


class Part:
    """One way a module's tensors are parted; the base is a part that parts nothing."""

    # Whether a rank other than the one that writes takes part in a gather (collective).
    collective = False

    def whole_parameters(self):
        """A context inside which this rank holds its parameters (ZeRO-3 frees them between
        steps); collective where the part is. It yields True where the parameters are freed
        again after it, so that a read must copy them."""
        return contextlib.nullcontext()

    def needs_tensors(self, writes):
        """Whether this rank's model tensors go into the gather (`writes`: this rank writes)."""
        return writes

    def optimizer_names(self, module):
        """(name, parameter) for the parameters the optimizer steps: the module's, or the shards
        a part steps instead."""
        return None

    def gather(self, tensors, state, kind, writes):
        """This part undone: (model tensors, optimizer state) whole as far as this part goes, on
        the ranks that go on (`writes`: this rank writes); None on the others. Collective where
        the part is."""
        return tensors, state

    def whole_shape(self, name, held):
        """The shape of the module's tensor `name` whole, where this rank holds `held`."""
        return held

    def cut(self, name, whole):
        """This rank's part of `whole`, the module's tensor `name` (or its optimizer state)."""
        return whole

    def own_state(self, state, kind):
        """This rank's part of the optimizer state `state` (whole, under the parameters' names),
        under the names the optimizer steps."""
        return state

    def manifest(self):
        """The layout the checkpoint records, where the part knows it better than the job."""
        return None


def cut_like_parameter(field, value):
    """torch's optimizers keep a parameter's per-element state (momentum_buffer, exp_avg,
    exp_avg_sq, max_exp_avg_sq) in its shape, parted as the parameter is; the rest (Adam's step)
    is a scalar, whole on every rank."""
    return field != "step" and value.dim() > 0


def parts_of(model):
    """(parts outermost first, the module under its own names) for `model`: a plain module, or
    the package's wrappers around one (a DataParallel around a TensorParallel around it), or a
    Pipeline, which is its own module (its stages under the model's names)."""
    parts = []
    while hasattr(model, "_placement"):
        parts.append(model._placement())
        inner = getattr(model, "module", None)
        if inner is None:
            break
        model = inner
    # A module split in place and kept without its TensorParallel.
    split = getattr(model, SPLIT_BY, None)
    if split is not None and not any(isinstance(p, TensorSlices) for p in parts):
        parts.append(split._placement())
    return parts, model


def read(module, optimizer, kind, parts, writes, name_state):
    """This rank's (model tensors, optimizer state) as it holds them: the tensors under the
    module's names (None where no part needs them here), the state under the names of what the
    optimizer steps. `name_state(kind, [(name, parameter)])` names the state."""
    needed = any(p.needs_tensors(writes) for p in parts) if parts else writes
    freed = False
    with contextlib.ExitStack() as holding:
        for part in parts:
            freed = holding.enter_context(part.whole_parameters()) or freed
        tensors = None
        if needed:
            # What a part frees after the context must be copied out of it.
            tensors = [(name, t.detach().clone() if freed else t.detach()) for name, t in
                       list(module.named_parameters()) + list(module.named_buffers())]
    state = []
    if optimizer is not None:
        state = name_state(optimizer, kind, optimizer_names(parts, module))
    return tensors, state


def optimizer_names(parts, module):
    """(name, parameter) for what the optimizer steps: a part's shards, else the module's."""
    for part in parts:
        named = part.optimizer_names(module)
        if named:
            return named
    return module.named_parameters()


def gather(parts, tensors, state, kind, writes):
    """Every part undone, outermost first; None on a rank that has nothing more to give."""
    for part in parts:
        gathered = part.gather(tensors, state, kind, writes)
        if gathered is None:
            return None
        tensors, state = gathered
    return tensors, state


def cut_state(parts, fields, kind):
    """The optimizer state whole ([(name, [(field, tensor)])] under the parameters' names) cut as
    the parts were applied, innermost first: [(name, [(field, tensor)])] under the names of what
    the optimizer steps."""
    for part in reversed(parts):
        fields = part.own_state(fields, kind)
    return fields


def whole_shape(parts, name, held):
    for part in reversed(parts):
        held = part.whole_shape(name, held)
    return held


def cut(parts, name, whole):
    for part in parts:
        whole = part.cut(name, whole)
    return whole


class TensorSlices(Part):
    """A TensorParallel's cut: each planned tensor, and its optimizer state, a slice per rank of
    the tensor group; the rest whole on every rank."""

    collective = True

    def __init__(self, split):
        self._split = split

    def needs_tensors(self, writes):
        # Every rank of the first replica's tensor group gives its slices to the one that writes.
        return writes or self._split.layout.replica == 0

    def gather(self, tensors, state, kind, writes):
        if tensors is None:  # another replica's group: the first one's gather writes
            return None
        # Each cut tensor whole in turn (collective over the group); the ranks that do not write
        # let it go at once.
        split = self._split
        whole_tensors, fields = [], []
        for name, t in tensors:
            whole = split.whole_of(name, t)
            if writes:
                whole_tensors.append((name, whole))
        for name, values in _loom.split_optimizer_state(kind, state):
            values = [(field, split.whole_of(name, value)
                       if cut_like_parameter(field, value) else value)
                      for field, value in values]
            if writes:
                fields.append((name, values))
        if not writes:
            return None
        return whole_tensors, _loom.name_optimizer_state(kind, fields)

    def whole_shape(self, name, held):
        return self._split.whole_shape(name, held)

    def cut(self, name, whole):
        return self._split.slice_of(name, whole)

    def own_state(self, fields, kind):
        return [(name, [(field, self._split.slice_of(name, value)
                         if cut_like_parameter(field, value) else value)
                        for field, value in values]) for name, values in fields]


class ZeroShards(Part):
    """A DataParallel under ZeRO: the optimizer steps one flat shard per bucket and rank
    (zero.bucket<b>.rank<r>), and at stage 3 each rank holds only its shard of the parameters
    between steps."""

    collective = True

    def __init__(self, wrapper, sync):
        self._wrapper = wrapper
        self._sync = sync

    @contextlib.contextmanager
    def whole_parameters(self):
        if self._sync.zero_stage != 3:
            yield False
            return
        self._sync.gather_whole()
        try:
            yield True  # freed again after: read copies
        finally:
            self._sync.shard_again()

    def optimizer_names(self, module):
        return self._wrapper.named_optimizer_parameters()

    def gather(self, tensors, state, kind, writes):
        # Every rank's shards go to its first replica, under the parameters' names.
        state = self._sync.gather_optimizer_state(state)
        return None if state is None else (tensors, state)

    def own_state(self, fields, kind):
        return _loom.split_optimizer_state(kind, self._sync.own_optimizer_state(
            _loom.name_optimizer_state(kind, fields)))


class Stages(Part):
    """A Pipeline: each rank holds its stages' tensors under the model's names; the first
    pipeline's rank 0 gathers them all (the other pipelines hold the same stages)."""

    collective = True

    def __init__(self, stages):
        self._stages = stages

    def needs_tensors(self, writes):
        return self._stages.takes_part_in_checkpoints

    def gather(self, tensors, state, kind, writes):
        if not self._stages.takes_part_in_checkpoints:
            return None
        return self._stages.gather(tensors, state)

    def manifest(self):
        return self._stages.manifest_json()
