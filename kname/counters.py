"""Launch counts per (call-site name, kernel, library), in first-seen order: what the census reads.

Kept apart from the cached call sites (kname.callsite), so that nothing is lost when a site leaves
the cache: evicted, its kernel freed, or the rules changed. Each site holds the counter of its
name (`counter_for`), shared by every site of that name, and the launch wrapper advances it in
place: next() on a counter is atomic, so no count is lost across threads. The counters are the
hot path's (kname.hotpath): the C one where the C wrapper runs, which it advances without making
an int. Past MAX_COUNTED names, new names are counted together under ranges.OVERFLOW_NAME.

A forked child counts its own launches from zero: callsite's fork handler calls start_from_zero()
and points its sites at the new counters (a site, not this module, knows which counter it holds).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from kname import hotpath, ranges
from kname._locks import new_lock

MAX_COUNTED = 200_000  # names counted apart: twice site_cache.MAX_SITES, evicted sites' names too
AT_RECURSION_LIMIT = "kname: recursion limit reached"

launch_counts: dict[tuple[str, str, str], hotpath.Counter] = {}
# Launches that ran unnamed at the recursion limit, counted apart: `next(at_recursion_limit)` is
# no Python call, for which there may be no room there.
at_recursion_limit = itertools.count()

_lock = new_lock()

# Whether the counts are read while the program runs (a stretch: a notebook cell's or a test's
# census), and what to call when they start to be: the lifecycle puts back the launch wrappers a
# profile took out of the call path (kname.profiling.wrappers), which alone count those launches.
_read_while_running = False
_when_first_read: Callable[[], None] | None = None


def counter_for(name: str, kernel: str, lib: str) -> hotpath.Counter:
    """The counter of launches under (name, kernel, lib), made on first use."""
    key = (name, kernel, lib)
    with _lock:
        counter = launch_counts.get(key)
        if counter is None or not hotpath.is_counter(counter):
            if counter is None and len(launch_counts) >= MAX_COUNTED:
                key = (ranges.OVERFLOW_NAME, "", "")  # past the bound: counted together
                shared = launch_counts.get(key)
                if shared is not None:
                    return shared
            counter = launch_counts[key] = hotpath.current().counter()  # new_counter(), inline
        return counter


def new_counter() -> hotpath.Counter:
    """A launch counter of the hot path in effect."""
    return hotpath.current().counter()


def value(counter: Any) -> int:
    """Launches counted so far by a counter of either hot path."""
    if type(counter) is itertools.count:
        return int(repr(counter)[6:-1])  # itertools.count shows its next value only in its repr
    return counter.value


def counts() -> dict[tuple[str, str, str], int]:
    """Launches per (name, kernel, library) so far, in first-seen order; none left out."""
    # list() copies in one step under the GIL while other threads may add names.
    rows = {key: value(counter) for key, counter in list(launch_counts.items())}
    rows[(AT_RECURSION_LIMIT, "", "")] = value(at_recursion_limit)
    return {key: launches for key, launches in rows.items() if launches}


def clear() -> None:
    """Forget every count."""
    global at_recursion_limit
    with _lock:
        at_recursion_limit = itertools.count()
        launch_counts.clear()


def start_from_zero() -> dict[Any, hotpath.Counter]:
    """In a forked child: every count from zero (the parent reports the launches made before the
    fork). Returns each old counter's new one, for the sites that hold them."""
    global at_recursion_limit
    at_recursion_limit = itertools.count()
    renewed = {counter: new_counter() for counter in launch_counts.values()}
    for key, counter in list(launch_counts.items()):
        launch_counts[key] = renewed[counter]
    return renewed


def read_from_now_on() -> None:
    """The counts are read while the program runs, from now on: nothing may leave a launch
    uncounted (a profile keeps the launch wrappers; one collecting puts them back now)."""
    global _read_while_running
    first = not _read_while_running
    _read_while_running = True
    if first and _when_first_read is not None:
        _when_first_read()


def read_while_running() -> bool:
    """Whether read_from_now_on() was called."""
    return _read_while_running


def when_first_read(call: Callable[[], None]) -> None:
    """Call `call` when read_from_now_on() is first called (the lifecycle's, at its import)."""
    global _when_first_read
    _when_first_read = call
