"""Every lock kname takes, and what a forked child does with them.

Each is a re-entrant lock of the C implementation (`_thread.RLock`), for two reasons:
- A signal handler runs on the thread it interrupts, maybe inside one of kname's critical
  sections, and may launch from a new line, warn or install: a plain lock would deadlock there.
  So each critical section must stay valid at every step: single dict or set operations under
  the GIL, never an invariant that holds only at the end.
- `with lock:` on a C lock is atomic against async exceptions (KeyboardInterrupt from a signal
  handler): no bytecode runs between acquiring and entering the block, nor between leaving it
  and releasing. A lock class written in Python can be interrupted between the two and stay held.

os.fork() copies each lock as it is. One held by another thread of the parent (building a call
site, saying a warning, wrapping a module) would never be released in the child, whose next new
call site, warning or import would then wait forever. Every kname lock is made here, so the fork
handler can give the child a free one of each (what they guard is valid at every step, and only
the forking thread lives on in the child). Modules that keep other per-process state register a
reset too.
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
import os
import weakref
from collections.abc import Callable
from typing import Any

# By order of making; weakly held: the lock of an object that is gone (a finished profile
# session's) needs no reset.
_locks: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_made = itertools.count()
_child_resets: list[Callable[[], None]] = []


def new_lock() -> Any:
    """A kname lock (a re-entrant C lock); the fork handler frees it in the child."""
    lock = _thread.RLock()
    _locks[next(_made)] = lock
    return lock


def all_locks() -> list[Any]:
    """Every kname lock alive, in the order they were made."""
    return list(_locks.values())


def reset_in_child(reset: Callable[[], None]) -> None:
    """Run `reset` in every child forked from now on, after the locks are freed."""
    _child_resets.append(reset)


def _after_fork_in_child() -> None:
    for lock in all_locks():
        # What threading itself does for its locks in a child: free, whoever held it.
        lock._at_fork_reinit()
    for reset in _child_resets:
        with contextlib.suppress(Exception):  # a failed reset must not break the child
            reset()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)
