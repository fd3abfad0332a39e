"""The kernels of cached call sites, weakly referenced: as a kernel is freed its sites leave the
cache, before its id can be reused under them.

Sites are keyed by id(kernel) and must not keep a kernel alive (one may hold gigabytes). A kernel
that cannot be weakly referenced (CuPy's Cython kernel classes) is held while it has cached sites,
so that its id cannot be reused: at most MAX_HELD_KERNELS of them, oldest out first.
"""

from __future__ import annotations

import collections
import functools
import weakref
from typing import Any

from kname import faults

MAX_HELD_KERNELS = 1000
# Stale entries a kernel's keys (or the cache's eviction queue) may hold before they are dropped.
QUEUE_SLACK = 64

_kernels: dict[int, _KernelSites] = {}  # id(kernel) -> its cached sites
# ids of the kernels kept alive (no weak references), oldest first
_held: collections.OrderedDict[int, None] = collections.OrderedDict()


class _KernelSites:
    """The keys of the cached sites of one kernel, and how kname learns that the kernel died."""

    __slots__ = ("held", "keys", "limit", "ref")

    def __init__(self, kernel: Any, sites: dict[tuple, Any]) -> None:
        self.keys: set[tuple] = set()
        self.limit = QUEUE_SLACK  # past this many keys, those no longer cached are dropped
        try:
            freed = functools.partial(_kernel_freed, id(kernel), sites)
            self.ref: Any = weakref.ref(kernel, freed)
            self.held = False
        except TypeError as exc:  # no weak references: kept alive while it has sites (bounded)
            if faults.from_outside(exc, weakref.ref, kernel):
                raise
            self.ref, self.held = kernel, True


def track(kernel: Any, key: tuple, sites: dict[tuple, Any]) -> None:
    """The site cached in `sites` at `key` leaves with `kernel`."""
    kernel_id = id(kernel)
    entry = _kernels.get(kernel_id)
    if entry is None:
        entry = _kernels[kernel_id] = _KernelSites(kernel, sites)
        if entry.held:
            _held[kernel_id] = None
            if len(_held) > MAX_HELD_KERNELS:
                oldest, _ = _held.popitem(last=False)
                _forget_kernel(oldest, _kernels.get(oldest), sites)
    elif len(entry.keys) >= entry.limit:
        # Keys of sites that left with their code are dropped here, in amortized O(1); from a
        # copy, in place: a signal handler may add a key meanwhile, its site cached first.
        for stale in [k for k in list(entry.keys) if k not in sites]:
            entry.keys.discard(stale)
        entry.limit = 2 * len(entry.keys) + QUEUE_SLACK
    entry.keys.add(key)


def untrack(key: tuple) -> None:
    """`key`'s site left the cache: its kernel's watch ends with its last site."""
    kernel_id = key[-1]
    entry = _kernels.get(kernel_id) if type(kernel_id) is int else None
    if entry is not None and key in entry.keys:
        entry.keys.discard(key)
        if not entry.keys:
            _kernels.pop(kernel_id, None)
            _held.pop(kernel_id, None)


def forget_all() -> None:
    """No kernel watched (the cache was emptied)."""
    _kernels.clear()
    _held.clear()


def _kernel_freed(kernel_id: int, sites: dict[tuple, Any], ref: weakref.ref) -> None:
    """A kernel with cached sites is being freed: its sites leave before its id can be reused."""
    entry = _kernels.get(kernel_id)
    if entry is not None and entry.ref is ref:
        _forget_kernel(kernel_id, entry, sites)


def _forget_kernel(kernel_id: int, entry: _KernelSites | None, sites: dict[tuple, Any]) -> None:
    # No lock: a kernel is freed wherever its last reference goes, in any thread, maybe inside
    # kname's own critical section on this one. Each step is one dict operation under the GIL,
    # and a kernel being freed has no site being built (building one holds a reference).
    _kernels.pop(kernel_id, None)
    _held.pop(kernel_id, None)
    if entry is not None:
        for key in list(entry.keys):
            sites.pop(key, None)
