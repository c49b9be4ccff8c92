"""The C++ object behind each of the package's Python types (a Loader's DataStream, a
DataParallel's ReplicaSync, a Pipeline's ScriptPipeline), for the package's other modules to hand
to the bindings that take it: loom.profile.Steps accounts a loader and a model, loom.checkpoint
gathers a Pipeline's stages. A type registers its object here when it is made, so that no module
reads another's private attributes. The registry holds its keys weakly: it keeps nothing alive.

A wrapper (loom.parallel's DataParallel and TensorParallel, a loom.pipeline.Pipeline) also
registers the modules it wraps, so that loom.profile.Steps handed a wrapper's `.module` (or a
Pipeline's Sequential) accounts the wrapper; those entries hold neither side alive either.
"""

import weakref

_objects = weakref.WeakKeyDictionary()
_wrappers = weakref.WeakKeyDictionary()  # a wrapped module: a weak reference to its wrapper


def attach(owner, native):
    """Records `native` as the C++ object behind `owner`; returns it."""
    _objects[owner] = native
    return native


def of(owner):
    """The C++ object behind `owner`, or None for an object that has none."""
    try:
        return _objects.get(owner)
    except TypeError:  # not weakly referenceable: not one of the package's types
        return None


def wraps(wrapper, module):
    """Records that `wrapper` wraps `module` (the latest wrapper of a module counts)."""
    _wrappers[module] = weakref.ref(wrapper)


def wrapper_of(model):
    """`model` itself where it is one of the package's wrappers, else the live wrapper that wraps
    it; None for a module that no wrapper holds."""
    if of(model) is not None:
        return model
    try:
        ref = _wrappers.get(model)
    except TypeError:  # not weakly referenceable
        return None
    return ref() if ref is not None else None
