"""Backward per forward line: the forward line that made the autograd node a backward launch runs.

autograd numbers every node it makes from a counter of the making thread (its sequence number,
which the node keeps into backward). While kname profile collects, the torch unit tells this
module, for each torch call the user's code makes (a TorchFunctionMode: torch_forward.py), the
numbers that call took on its thread, [before, after), and the call's line, named by the
profile's own rules. At a launch on autograd's thread the node running there gives its number,
and so its line (`line_of`). A number no recorded call took (a node made in C++ with no torch
call above it, on a thread the mode does not see, or forgotten past the bound) has no line:
UNKNOWN, never a guess; a number two threads' calls both took is UNKNOWN too.

Kept per thread, in the order taken (numbers only grow on a thread), contiguous calls of one line
as one range, at most MAX_RANGES in all: past that a thread's oldest half is forgotten (the
oldest nodes are the ones backward has run and freed).
"""

from __future__ import annotations

import bisect
import threading

from kname._locks import new_lock, reset_in_child

MAX_RANGES = 1_000_000


class _Ranges:
    """One thread's ranges: starts, ends and lines, in the order the numbers were taken."""

    __slots__ = ("ends", "lines", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.lines: list[str] = []

    def add(self, start: int, end: int, line: str) -> None:
        if self.lines and self.ends[-1] == start and self.lines[-1] == line:
            self.ends[-1] = end  # the same line's next call: one range
            return
        self.starts.append(start)
        self.ends.append(end)
        self.lines.append(line)

    def find(self, number: int) -> str | None:
        index = bisect.bisect_right(self.starts, number) - 1
        if index >= 0 and number < self.ends[index]:
            return self.lines[index]
        return None

    def forget_oldest_half(self) -> int:
        half = len(self.starts) // 2
        del self.starts[:half], self.ends[:half], self.lines[:half]
        return half


_lock = new_lock()
_threads: dict[int, _Ranges] = {}
_count = 0  # ranges kept, all threads


def record(start: int, end: int, line: str) -> None:
    """The torch call at `line` on this thread took the node numbers [start, end)."""
    global _count
    if end <= start:
        return
    ident = threading.get_ident()
    ranges = _threads.get(ident)
    with _lock:
        if ranges is None:
            ranges = _threads[ident] = _Ranges()
        before = len(ranges.starts)
        ranges.add(start, end, line)
        _count += len(ranges.starts) - before
        if _count > MAX_RANGES:
            _count -= ranges.forget_oldest_half()


def line_of(number: int) -> str | None:
    """The forward line whose call made node `number`; None: not known (see the module)."""
    found = None
    with _lock:  # a thread's oldest half may be forgotten meanwhile
        lines = [ranges.find(number) for ranges in _threads.values()]
    for line in lines:
        if line is None:
            continue
        if found is not None:
            return None  # two threads took this number: which node this is, is not known
        found = line
    return found


def forget() -> None:
    """Nothing recorded (a profile starts again, or a forked child)."""
    global _count
    with _lock:
        _threads.clear()
        _count = 0


reset_in_child(forget)
