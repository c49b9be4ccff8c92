"""The C++ object behind each of the package's Python types (a Loader's DataStream, a
DataParallel's ReplicaSync, a Pipeline's ScriptPipeline), for the package's other modules to hand
to the bindings that take it: loom.profile.Steps accounts a loader and a model, loom.checkpoint
gathers a Pipeline's stages. A type registers its object here when it is made, so that no module
reads another's private attributes. The registry holds its keys weakly: it keeps nothing alive.
"""

import weakref

_objects = weakref.WeakKeyDictionary()


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
