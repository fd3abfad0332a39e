"""The launch-bound verdict's numbers, as the join counts them per line (docs/verdict.md).

For each line: its timed kernel launch calls, their CPU time (the callback's timestamps at the
call's enter, once kname's own work for it is done, and at its exit: outermost calls only, a
driver call inside the runtime's being part of it), and the GPU idle time its launches left.
Copies and sets are left out: their API call may wait for the GPU (a synchronous copy).

The idle before a GPU record is the time its stream sat empty while its launch was under way: from
the later of the end of the stream's previous work and the launch call's enter, to the record's
start (0 when the record started first). Time the stream sat empty before the launch call began (the
program busy elsewhere, or sleeping) is no launch's. A launch call counts when its first GPU record
is joined, at the line the record goes to; graph work is timed by no launch (its records only end
the stream's previous work), and neither are copies and sets (their records end it too).

The C join keeps the same tables (_cupti_c/launch_times.c); this is their specification.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from kname.profiling.records import KERNEL, ActivityRecord, LaunchRecord

MAX_STREAMS = 4096  # streams whose last end is kept (past it, a new stream's idle is not)


class Timed(Protocol):
    """What a line's totals keep of its launch times (join.SiteTotals)."""

    launch_calls: int
    launch_cpu_ns: int
    idle_ns: int


def idle_before(start: int, previous_end: int, enter: int) -> int:
    """The time a stream sat empty before work starting at `start`, counted from the later of
    its previous work's end and the enter of the launch call behind it (0 if none)."""
    return max(0, start - max(previous_end, enter))


class LaunchTimes:
    """Timed launch calls waiting for their first GPU record, and each stream's last end."""

    def __init__(self, max_calls: int, on: bool = True) -> None:
        self.max_calls = max_calls
        self.on = on  # off: no call is kept (the verdict not asked for, or streams untimed)
        self._calls: OrderedDict[int, LaunchRecord] = OrderedDict()  # by correlation id
        # A call made inside another -> the outer one: its GPU record may carry either's id
        # (the driver's inside the runtime's, as CUDA 12 gave them on the H200).
        self._outer_of: OrderedDict[int, int] = OrderedDict()
        self._ends: dict[tuple[int, int], int] = {}  # (device, stream) -> its last end

    def launch(self, record: LaunchRecord) -> None:
        """A launch call: kept when it is outermost (its times are read at its first GPU record:
        the Python callback hands it over at its enter). No lock (single dict steps)."""
        if not self.on:
            return
        if record.parent:
            _bounded_put(self._outer_of, record.correlation_id, record.parent, self.max_calls)
        elif not record.graph:
            _bounded_put(self._calls, record.correlation_id, record, self.max_calls)

    def count(self, totals: Timed, record: ActivityRecord, graph: bool) -> None:
        """A GPU record joined to the line of `totals` (under the join's lock): its launch
        call's time, the first time, and the idle it left."""
        key = (record.device, record.stream)
        previous_end = self._ends.get(key, 0)
        outer = self._outer_of.pop(record.correlation_id, record.correlation_id)
        call = None if graph else self._calls.pop(outer, None)
        if call is not None and record.kind == KERNEL and call.end > call.start > 0:
            totals.launch_calls += 1
            totals.launch_cpu_ns += call.end - call.start
            if previous_end:
                totals.idle_ns += idle_before(record.start, previous_end, call.start)
        if record.end > previous_end and (key in self._ends or len(self._ends) < MAX_STREAMS):
            self._ends[key] = record.end


def _bounded_put(table: OrderedDict, key: int, value: object, bound: int) -> None:
    """table[key] = value, the oldest entry dropped past `bound` (calls that got no GPU record:
    captured ones, or those whose record came with the other call's id)."""
    table[key] = value
    if len(table) > bound:
        table.popitem(last=False)
