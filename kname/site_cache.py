"""The cache of call sites: bounded, oldest out first, and never keeping a kernel or code object
alive.

`sites[(id(code), f_lasti, kernel_key)]` is what every launch looks up (kname.launch). Keys hold
ids, not objects: CPython hashes code by value, on every look-up. Each site holds weak references
to the code objects of its key, whose callbacks take it out of the cache as one is freed (a plain
dict pop bound to the key: C alone, nothing can be raised into it); its kernel's are
kname.kernel_refs'.
"""

from __future__ import annotations

import collections
import functools
import itertools
import weakref
from types import CodeType
from typing import Any

from kname import kernel_refs
from kname._locks import new_lock
from kname.kernel_refs import QUEUE_SLACK

MAX_SITES = 100_000

sites: dict[tuple, Any] = {}
# The naming core's lock (kname.callsite's too): the cache, the rules, the decisions on code.
_lock = new_lock()
# (key, site) in the order the sites were cached: eviction pops the oldest in O(1). An entry whose
# site is no longer cached under its key is stale, skipped once.
_queue: collections.deque[tuple[tuple, Any]] = collections.deque()


def store(key: tuple, site: Any, kernel: Any, kernel_key: Any) -> None:
    """Cache `site` under `key` (under _lock), making room first if the cache is full."""
    if len(sites) >= MAX_SITES:
        _evict_oldest()
    try:
        # Cached, then watched: a kernel's record keeps the keys that are cached (track), and a
        # signal handler may store a site in between. Cached and watched, or not cached at all.
        sites[key] = site
        if kernel is not None and kernel_key == id(kernel):
            kernel_refs.track(kernel, key, sites)
        _queue.append((key, site))
    except BaseException:
        sites.pop(key, None)
        raise
    if len(_queue) > 2 * len(sites) + QUEUE_SLACK:
        _compact_queue()


def code_refs(key: tuple, codes: tuple[CodeType, ...]) -> tuple[weakref.ref, ...]:
    """Weak references to the code objects keying `key`, each taking the site at `key` out of
    the cache as it is freed. Whatever site is cached there then is keyed by that code's id, and
    the callback is C alone (dict.pop), so no exception can be raised into it."""
    forget = functools.partial(sites.pop, key)  # called with the reference: pop(key, default)
    if len(codes) == 1:  # most sites: one user frame
        return (weakref.ref(codes[0], forget),)
    return tuple(map(weakref.ref, codes, itertools.repeat(forget)))


def forget_sites() -> None:
    """Empty the cache."""
    sites.clear()
    _queue.clear()
    kernel_refs.forget_all()


def _evict_oldest() -> None:
    while _queue:
        key, site = _queue.popleft()
        if sites.get(key) is site:
            sites.pop(key, None)
            kernel_refs.untrack(key)
            return


def _compact_queue() -> None:
    """Drop the stale entries: after at least as many were added, so O(1) per site.

    Each entry is taken from the front and put back at the end if live, never iterated over: a
    signal handler storing a site meanwhile appends to the queue, and its entry is kept."""
    for _ in range(len(_queue)):
        if not _queue:  # a signal handler's eviction took the rest
            return
        key, site = _queue.popleft()
        if sites.get(key) is site:
            _queue.append((key, site))
