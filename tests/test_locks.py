"""kname's locks: none deadlocks the thread holding it (a signal handler runs on that thread),
and none can be left held by an async exception.

The signal handlers and forks themselves run in real programs: test_reliability_async and
test_reliability_concurrency.
"""

from __future__ import annotations

import sys
import threading

import pytest

import kname.lifecycle
import kname.rename
from kname import _locks, _warnings, callsite, counters, ranges

MODULE_LOCKS = {
    "callsite": callsite._lock,
    "counters": counters._lock,
    "ranges": ranges._lock,
    "warnings": _warnings._lock,
    "lifecycle": kname.lifecycle._lock,
    "rename": kname.rename._lock,
}


def lock_name(lock) -> str:
    named = [name for name, known in MODULE_LOCKS.items() if known is lock]
    return named[0] if named else f"lock{_locks.all_locks().index(lock)}"


def test_every_module_lock_is_made_by_locks_so_a_forked_child_gets_it_free() -> None:
    made = {id(lock) for lock in _locks.all_locks()}
    assert {name for name, lock in MODULE_LOCKS.items() if id(lock) not in made} == set()


@pytest.mark.parametrize("lock", _locks.all_locks(), ids=lock_name)
def test_the_thread_holding_a_kname_lock_can_take_it_again(lock) -> None:
    """What a signal handler does when it launches, warns or installs inside a critical section."""
    with lock:
        taken_again = lock.acquire(timeout=1)
        if taken_again:
            lock.release()
    assert taken_again


@pytest.mark.parametrize("lock", _locks.all_locks(), ids=lock_name)
def test_entering_and_leaving_a_kname_lock_runs_no_python_code(lock) -> None:
    """No bytecode between acquiring and entering the block, or leaving it and releasing: an
    async exception (raised only where bytecode runs) cannot leave the lock held."""
    python_calls = []

    def profile(frame, event, arg):
        if event == "call":
            python_calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        with lock:
            pass
    finally:
        sys.setprofile(None)
    assert python_calls == []


def test_a_kname_lock_held_by_another_thread_still_excludes() -> None:
    """Re-entrant for its holder only: another thread waits."""
    lock = _locks.new_lock()
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        assert not lock.acquire(blocking=False)
    finally:
        release.set()
        holder.join()
    assert lock.acquire(blocking=False)
    lock.release()


def test_the_locks_of_objects_gone_are_not_kept() -> None:
    """Every ProfileSession makes kname locks: the registry keeps no lock alive."""
    import gc

    from kname import _locks

    gc.collect()  # locks of objects other tests left for the collector go first
    before = len(_locks.all_locks())
    locks = [_locks.new_lock() for _ in range(100)]
    assert len(_locks.all_locks()) == before + 100
    del locks
    gc.collect()
    assert len(_locks.all_locks()) == before
