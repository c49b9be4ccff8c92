"""Tensor parallelism for a script's own module: a plan names its linears column- or row-parallel,
as torch's `parallelize_module` plans do (torchtitan's), and the ranks of the job's tensor group
each keep their slice of those weights. Exported as loom.parallel.TensorParallel,
ColwiseParallel and RowwiseParallel; see loom.parallel's docstring for an example.

The cuts are Loom's (src/loom/models/tensor_parallel.h, as `loom train`'s parallel.tensor cuts
its GPT): a column-parallel linear keeps its rows of the weight [out, in] and of the bias, and
its input passes through enter_split (itself forward, its gradient summed over the group
backward); a row-parallel one keeps its columns of the weight, and its output is
leave_split(x @ w_slice^T) (summed over the group forward) plus the whole bias. The sums are
Loom's communicator's: shared memory inside a host, TCP between hosts.
"""

import collections
import fnmatch
import functools
import itertools

import torch

from . import _loom, _native, _placement, distributed

__all__ = ["ColwiseParallel", "RowwiseParallel", "TensorParallel"]

# The tensor groups this process made, to name each group's communicator apart from the
# others'. Every rank makes its groups in the same order (making one is collective), so the
# counts agree.
_groups_made = itertools.count()


def next_group_index():
    """A number for the next group this process makes (a TensorParallel's, or the replicas of its
    slices that a DataParallel around it makes), to name its communicator apart."""
    return next(_groups_made)

# The attribute of a module split in place that holds its TensorParallel, so that loom.checkpoint
# handed the module itself still saves whole tensors rather than this rank's slices, even when the
# script kept only the module (the split is in place). Set past nn.Module's __setattr__, so that
# it is no submodule (state_dict() is unchanged); the cycle it makes is the garbage collector's.
_SPLIT_BY = _placement.SPLIT_BY


def split_by(model):
    """The TensorParallel that `model` is, or that split `model` in place; None for a module no
    TensorParallel split."""
    if isinstance(model, TensorParallel):
        return model
    return getattr(model, _SPLIT_BY, None)


class ColwiseParallel:
    """A linear cut by its outputs: each rank keeps its rows of the weight (and of the bias), so
    its output is its share of the features (the heads of an attention that follows). A fused
    weight whose output is `sections` equal parts side by side ([q | k | v]: sections=3) is cut
    part by part: each rank keeps its share of q, of k and of v, in that order."""

    dim = 0  # the weight's [out, in] dimension that is cut

    def __init__(self, sections=1):
        if isinstance(sections, bool) or not isinstance(sections, int) or sections < 1:
            raise ValueError(f"sections: {sections!r}; expected a whole number of at least 1")
        self.sections = sections

    def __eq__(self, other):
        return type(other) is type(self) and other.sections == self.sections

    def __repr__(self):
        return "colwise" if self.sections == 1 else f"colwise(sections={self.sections})"


class RowwiseParallel:
    """A linear cut by its inputs: each rank keeps its columns of the weight, takes its share of
    the features in, and the ranks' partial products are summed; the bias is whole, added once
    after the sum."""

    dim = 1  # the weight's [out, in] dimension that is cut
    sections = 1

    def __eq__(self, other):
        return type(other) is type(self)

    def __repr__(self):
        return "rowwise"


_STYLES = {"colwise": ColwiseParallel(), "rowwise": RowwiseParallel()}


def _style_of(pattern, style):
    if isinstance(style, (ColwiseParallel, RowwiseParallel)):
        return style
    if isinstance(style, str) and style in _STYLES:
        return _STYLES[style]
    raise _loom.ConfigError(f"plan['{pattern}']: {style!r} is not \"colwise\", \"rowwise\", "
                            "ColwiseParallel(sections=N) or RowwiseParallel()", key="plan",
                            pattern=pattern, problem="style", value=style)


def _planned_linears(module, plan):
    # {module name: (pattern, style, linear)}, in the module's order.
    if not isinstance(plan, dict) or not plan:
        raise _loom.ConfigError("plan: expected a dict of {submodule name or pattern: "
                                "\"colwise\" | \"rowwise\"}", key="plan", problem="not_a_dict")
    named = list(module.named_modules())
    chosen = {}
    for pattern, style in plan.items():
        style = _style_of(pattern, style)
        matched = [(name, m) for name, m in named if name and fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise _loom.ConfigError(f"plan['{pattern}']: no submodule of the "
                                    f"{type(module).__name__} is named so", key="plan",
                                    pattern=pattern, problem="no_match")
        for name, m in matched:
            if not isinstance(m, torch.nn.Linear):
                raise _loom.ConfigError(f"plan['{pattern}']: '{name}' is a {type(m).__name__}, "
                                        "not a torch.nn.Linear", key="plan", pattern=pattern,
                                        module=name, problem="not_linear", value=type(m).__name__)
            if name in chosen:
                raise _loom.ConfigError(f"plan['{pattern}']: '{name}' is planned already, by "
                                        f"plan['{chosen[name][0]}']", key="plan", pattern=pattern,
                                        module=name, problem="planned_twice",
                                        planned_by=chosen[name][0])
            chosen[name] = (pattern, style, m)
    order = {name: i for i, (name, _) in enumerate(named)}
    return dict(sorted(chosen.items(), key=lambda item: order[item[0]]))


def _divided_attributes(module, divide, ranks):
    # [(pattern, submodule, attribute, value // ranks)], checked before anything changes.
    if isinstance(divide, str):
        divide = [divide]
    out = []
    named = list(module.named_modules())
    for pattern in divide:
        where, _, attribute = pattern.rpartition(".")
        matched = [(name, m) for name, m in named
                   if fnmatch.fnmatchcase(name, where) and hasattr(m, attribute)]
        if not matched:
            raise _loom.ConfigError(f"divide: '{pattern}' names no attribute of the "
                                    f"{type(module).__name__}'s submodules", key="divide",
                                    pattern=pattern, problem="no_match")
        for name, m in matched:
            value = getattr(m, attribute)
            full = f"{name}.{attribute}" if name else attribute
            if isinstance(value, bool) or not isinstance(value, int):
                raise _loom.ConfigError(f"divide: '{full}' ('{pattern}') is "
                                        f"{type(value).__name__} {value!r}, not an int",
                                        key="divide", pattern=pattern, attribute=full,
                                        problem="not_an_int", value=value)
            if value % ranks:
                raise _loom.ConfigError(f"divide: '{full}' ('{pattern}') is {value}, which "
                                        f"does not divide by the {ranks} tensor ranks",
                                        key="divide", pattern=pattern, attribute=full,
                                        problem="indivisible", value=value, ranks=ranks)
            out.append((m, attribute, value // ranks))
    return out


def _rowwise_forward(linear, group, x):
    # The partial products summed over the group, then the (whole) bias once.
    y = group.leave_split(torch.nn.functional.linear(x, linear.weight))
    return y if linear.bias is None else y + linear.bias


def _colwise_pre_hook(group, _linear, args):
    return (group.enter_split(args[0]),) + tuple(args[1:])


class TensorParallel(torch.nn.Module):
    """Splits `module`'s linears over the job's tensor group, as `plan` says, in place; calls
    `module` as it is.

    Args:
        module: any torch.nn.Module, built whole (the same on every rank, or rank 0's values
            win: the group's first rank's parameters and buffers go to the others first).
        plan: {submodule name or fnmatch pattern ("blocks.*.attn.qkv"): "colwise", "rowwise",
            ColwiseParallel(sections=N) or RowwiseParallel()}; every entry must name at least
            one torch.nn.Linear, each linear at most once.
        divide: the integer attributes that count what is cut ("blocks.*.attn.n_head": the
            heads each rank computes), divided by the tensor ranks, as torchtitan sets
            `n_heads //= tp`.
        tensor: the ranks of a group (consecutive ranks: the mesh's innermost dimension);
            default every training rank of the job. Fewer make several groups, each a replica
            of the module: wrap the TensorParallel in a DataParallel, which averages the
            gradients over the ranks holding the same slices.
        job: the loom.distributed Job (default: the one init() joined).

    Every rank of the group must be given the same input (the same batch) and, where dropout
    runs outside the cut linears, the same random seed. The module's forward must read its
    widths from what it holds (`n_head`, reshapes with -1), not from the input's width.

    The parameters stay the same objects, now holding this rank's slices, so an optimizer made
    afterwards steps the slices. full_state_dict() gives the whole tensors under the module's
    own names and load_full_state_dict() cuts them again; loom.checkpoint.save and load do the
    same for the model and its optimizer state (through whole_of and slice_of by name): a
    checkpoint moves between a tensor group and one process. Raises loom.ConfigError naming the
    plan entry or attribute that cannot be done (before anything is cut).
    """

    def __init__(self, module, plan, *, divide=(), tensor=None, job=None):
        super().__init__()
        job = job if job is not None else distributed.current()
        ranks = job.trainers if tensor is None else tensor
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise _loom.ConfigError(f"tensor: {tensor!r} is not a number of ranks", key="tensor",
                                    value=tensor)
        linears = _planned_linears(module, plan)
        divided = _divided_attributes(module, divide, ranks)
        self.module = module
        self._group = _native.attach(self, _loom.TensorGroup(job, ranks, next_group_index()))
        _native.wraps(self, module)  # loom.profile.Steps(model=model.module) accounts this
        with torch.no_grad():
            for t in itertools.chain(module.parameters(), module.buffers()):
                self._group.broadcast(t.detach())
        slices = self._cut(linears)
        with torch.no_grad():
            for parameter, piece in slices:
                parameter.data = piece
        for m, attribute, value in divided:
            setattr(m, attribute, value)
        # The module's tensors that are cut: {name in module.state_dict(): style}.
        self._splits = collections.OrderedDict()
        for name, (_, style, linear) in linears.items():
            self._splits[f"{name}.weight"] = style
            if linear.bias is not None and isinstance(style, ColwiseParallel):
                self._splits[f"{name}.bias"] = style
            if isinstance(style, ColwiseParallel):
                linear.register_forward_pre_hook(functools.partial(_colwise_pre_hook, self._group))
            else:
                linear.forward = functools.partial(_rowwise_forward, linear, self._group)
        self._plan = {name: style for name, (_, style, _) in linears.items()}
        object.__setattr__(module, _SPLIT_BY, self)

    def _cut(self, linears):
        # This rank's slice of each cut tensor, all made before any is set.
        slices = []
        for name, (pattern, style, linear) in linears.items():
            tensors = [("weight", linear.weight)]
            if linear.bias is not None and isinstance(style, ColwiseParallel):
                tensors.append(("bias", linear.bias))
            for field, t in tensors:
                try:
                    piece = self._group.slice_of(t.detach(), style.dim, style.sections)
                except _loom.Error as e:
                    raise _loom.ConfigError(f"plan['{pattern}']: '{name}.{field}' of shape "
                                            f"{list(t.shape)}: {e}", key="plan", pattern=pattern,
                                            tensor=f"{name}.{field}", problem="indivisible",
                                            value=list(t.shape)) from None
                slices.append((t, piece))
        return slices

    def _placement(self):
        # loom.checkpoint's view of the cut (loom/_placement.py).
        return _placement.TensorSlices(self)

    @property
    def plan(self):
        """The plan as applied: {linear's name: ColwiseParallel | RowwiseParallel}."""
        return dict(self._plan)

    @property
    def tensor_rank(self):
        """This rank's place in its tensor group."""
        return self._group.rank

    @property
    def tensor_ranks(self):
        """The ranks of the tensor group."""
        return self._group.size

    @property
    def layout(self):
        """The job's ranks as data x tensor (a loom.distributed.Layout): its `replica` is this
        rank's tensor group, `replicas` how many groups there are."""
        return self._group.layout

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def whole_shape(self, name, piece):
        """The shape of the module's tensor `name` whole, where `piece` is this rank's part of it
        (or a tensor of that shape: the optimizer's state of a parameter; or its shape)."""
        shape = list(piece.shape if isinstance(piece, torch.Tensor) else piece)
        style = self._splits.get(name)
        if style is not None:
            shape[style.dim] *= self._group.size
        return shape

    def whole_of(self, name, piece):
        """The module's tensor `name` whole, from every rank's `piece` of it (this rank's slice,
        or a tensor of its shape: the optimizer's state of that parameter). Collective where
        `name` is cut (every rank of the group calls it for the same names in the same order;
        each gets the whole tensor); `piece` itself where it is not."""
        style = self._splits.get(name)
        if style is None:
            return piece
        return self._group.whole_of(piece.detach(), style.dim, style.sections)

    def slice_of(self, name, whole):
        """This rank's slice of `whole`, the module's tensor `name` (or a tensor of its shape)
        whole, as a new tensor where `name` is cut; `whole` itself where it is not. Not
        collective; the caller checks the shape (whole_shape)."""
        style = self._splits.get(name)
        if style is None:
            return whole
        return self._group.slice_of(whole.detach(), style.dim, style.sections)

    def full_state_dict(self):
        """The module's state_dict with whole tensors, under the module's own names, on every
        rank of the group (collective: the cut ones are gathered from every rank's slice)."""
        out = collections.OrderedDict()
        with torch.no_grad():
            for name, t in self.module.state_dict(keep_vars=True).items():
                piece = t.detach()
                if piece.numel() and not piece.untyped_storage().nbytes():
                    raise _loom.Error(
                        f"full_state_dict: '{name}' holds no memory between steps: a "
                        "DataParallel(zero=3) around the module shards it; call its close() "
                        "first, or save with loom.checkpoint")
                whole = self.whole_of(name, piece)
                out[name] = whole.clone() if whole is piece else whole
        return out

    def load_full_state_dict(self, state):
        """Loads whole tensors (full_state_dict()'s, or a plain module's state_dict) into the
        module, this rank keeping its slices. Raises loom.DataError naming a tensor that is
        missing or has another shape."""
        with torch.no_grad():
            for name, t in self.module.state_dict(keep_vars=True).items():
                if name not in state:
                    raise _loom.DataError(f"load_full_state_dict: no tensor '{name}'",
                                          tensor=name, problem="missing")
                value = state[name]
                expected = self.whole_shape(name, t)
                if list(value.shape) != expected:
                    raise _loom.DataError(f"load_full_state_dict: tensor '{name}' has shape "
                                          f"{list(value.shape)}, the module's whole one is "
                                          f"{expected}", tensor=name, problem="shape",
                                          value=list(value.shape), expected=expected)
                t.copy_(self.slice_of(name, value))

    def extra_repr(self):
        ranks = self._group.size
        return (f"tensor parallel over {ranks} rank{'s' if ranks > 1 else ''} "
                f"({self._group.backend}): "
                + ", ".join(f"{name} {style!r}" for name, style in self._plan.items()))
