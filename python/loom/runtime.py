"""Process-wide settings, only when a script asks for them.

`import loom` leaves the process as it found it. `loom train` makes two process-wide choices for
itself, and a script can make the same ones here:

    loom.runtime.configure(threads="auto", allocator="caching")
"""

from . import _loom

__all__ = ["configure", "usable_cores"]


def usable_cores():
    """Cores this process may use: its affinity mask and cgroup CPU quota."""
    return _loom.usable_cores()


def configure(*, threads=None, allocator=None):
    """Applies `loom train`'s runtime settings to this whole process.

    Args:
        threads: LibTorch's intra-op threads: a count, or "auto" for the usable cores.
            None leaves them.
        allocator: "caching" makes Loom's caching CPU allocator LibTorch's (batches and
            activations reuse freed slabs instead of new pages from the kernel, and glibc keeps
            large freed blocks); "system" leaves LibTorch's. None leaves it. Once installed, the
            caching allocator stays for the life of the process.

    Returns the settings now in force: {"threads": n, "allocator": "caching" | "system"}.
    """
    if threads is not None:
        if threads == "auto":
            threads = _loom.usable_cores()
        elif isinstance(threads, bool) or not isinstance(threads, int):
            raise _loom.ConfigError(f"threads: expected a count or 'auto', got {threads!r}")
        _loom.set_threads(threads)
    if allocator is not None:
        _loom.set_allocator(str(allocator))
    import torch
    return {"threads": torch.get_num_threads(),
            "allocator": "caching" if _loom.caching_allocator_installed() else "system"}
