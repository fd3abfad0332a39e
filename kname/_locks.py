"""Every lock kname takes, and what a forked child does with them.

os.fork() copies each lock as it is. One held by another thread of the parent (building a call
site, saying a warning, wrapping a module) would never be released in the child, whose next new
call site, warning or import would then wait forever. Every kname lock is made here, so the fork
handler can give the child a free one of each: what they guard is valid between any two steps
of their critical sections (single dict or set operations under the GIL), and only the forking
thread lives on in the child. Modules that keep other per-process state register a reset too.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

_locks: list[Lock] = []
_child_resets: list[Callable[[], None]] = []


class Lock:
    """A lock (re-entrant or not) that a forked child gets back free."""

    __slots__ = ("_lock", "_reentrant")

    def __init__(self, reentrant: bool) -> None:
        self._reentrant = reentrant
        self._lock = threading.RLock() if reentrant else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()

    def renew(self) -> None:
        """A free lock in place of this one, whoever held it (the fork handler's job)."""
        self._lock = threading.RLock() if self._reentrant else threading.Lock()


def new_lock(reentrant: bool = False) -> Lock:
    """A kname lock; the fork handler renews it in the child."""
    lock = Lock(reentrant)
    _locks.append(lock)
    return lock


def reset_in_child(reset: Callable[[], None]) -> None:
    """Run `reset` in every child forked from now on, after the locks are renewed."""
    _child_resets.append(reset)


def _after_fork_in_child() -> None:
    for lock in _locks:
        lock.renew()
    for reset in _child_resets:
        with contextlib.suppress(Exception):  # a failed reset must not break the child
            reset()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
