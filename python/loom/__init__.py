"""Loom from Python: Loom's input pipeline, trainer and planner in a PyTorch script.

    import loom
    loader = loom.data.Loader({"data": {"source": "image_folder", "path": "/data/train"}})
    for images, labels in loader:
        ...

Importing loom changes nothing process-wide (no allocator, thread or signal settings);
`loom.runtime.configure(...)` opts in to the settings `loom train` makes for itself.
"""

import torch  # noqa: F401  (first: the extension hands over torch tensors)

from . import _loom
from ._loom import CommError, ConfigError, DataError, Error, TimeoutError, __version__
from . import checkpoint, data, distributed, parallel, pipeline, profile, runtime
from ._run import plan, train

# The exit status of a rank that stopped on SIGTERM after committing a checkpoint ("preempted,
# resumable"), as `loom train` exits: `loom launch` passes it on and does not restart it.
PREEMPTED = _loom.PREEMPTED_EXIT_CODE

__all__ = [
    "CommError",
    "ConfigError",
    "DataError",
    "Error",
    "PREEMPTED",
    "TimeoutError",
    "__version__",
    "checkpoint",
    "data",
    "distributed",
    "parallel",
    "pipeline",
    "plan",
    "profile",
    "runtime",
    "train",
]
