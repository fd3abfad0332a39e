"""Live-bytes accounting per line: allocations and frees in, per-site totals and peaks out.

One Ledger per view of memory (the driver's, torch's caching allocator, CuPy's pool: what one
sees, another may also see, so views are never added together). Each allocation is charged to
the line that made it, and so is its free, wherever the free happens: a line's live bytes are
what it allocated and is still held. Kept per line: bytes and count allocated and freed, its own
peak (the most it held at once), and what it held at the view's peak (the first moment the live
bytes of the whole view reached their maximum). The timeline of the view's live bytes is kept
bounded (Timeline), its peak kept exact.

Every step is O(1): a line's bytes at the view's peak are found lazily (a line not changed since
the latest peak holds there what it holds now; one about to change saves its bytes first).
Plain Python over plain values: tested with hypothesis (tests/profiling/test_memory.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_POINTS = 512  # timeline points kept per view (pairs merge, keeping the higher, past that)
MAX_BLOCKS = 4_000_000  # live allocations followed per view; past that, new ones are not


@dataclass
class SiteMemory:
    """One line's memory in one view, in bytes."""

    allocated: int = 0
    allocations: int = 0
    freed: int = 0  # bytes of this line's allocations freed (wherever the free was)
    frees: int = 0
    live: int = 0  # held now
    peak: int = 0  # the most held at once
    _at_peak: int = 0  # held at the view's latest peak, valid when _epoch is the view's epoch
    _epoch: int = -1

    def as_dict(self, at_view_peak: int) -> dict[str, int]:
        """The JSON form (per site, per view): live bytes at the end are allocated - freed."""
        return {
            "allocated": self.allocated,
            "allocations": self.allocations,
            "freed": self.freed,
            "frees": self.frees,
            "peak": self.peak,
            "at_peak": at_view_peak,
        }


@dataclass
class Timeline:
    """(time, live bytes) after each change, bounded: past `max_points`, neighbours merge two
    by two into the later time with the higher bytes, so the peak's height stays."""

    max_points: int = MAX_POINTS
    points: list[tuple[int, int]] = field(default_factory=list)

    def add(self, time: int, live: int) -> None:
        """One point; halves the points when full."""
        self.points.append((time, live))
        if len(self.points) > self.max_points:
            pairs = zip(self.points[0::2], self.points[1::2], strict=False)
            merged = [(b[0], max(a[1], b[1])) for a, b in pairs]
            if len(self.points) % 2:
                merged.append(self.points[-1])
            self.points = merged


class Ledger:
    """One view's allocations and frees, charged to lines (see the module's docstring)."""

    def __init__(self, max_points: int = MAX_POINTS, max_blocks: int = MAX_BLOCKS) -> None:
        self.sites: dict[str, SiteMemory] = {}
        self.live = 0
        self.peak = 0
        self.peak_time = 0
        self.unmatched_frees = 0  # frees of an address not seen allocated (made before, say)
        self.untracked = 0  # allocations not followed past max_blocks
        self.timeline = Timeline(max_points)
        self._blocks: dict[int, tuple[SiteMemory, int]] = {}  # address -> (its site, bytes)
        self._max_blocks = max_blocks
        self._epoch = 0  # counts the view's new peaks

    def allocate(self, site: str, address: int, size: int, time: int) -> None:
        """`site` allocated `size` bytes at `address`. An address allocated again without a free
        between (a free not seen) is freed first."""
        if address in self._blocks:
            self.free(address, time)
        if len(self._blocks) >= self._max_blocks:
            self.untracked += 1
            return
        memory = self.sites.get(site)
        if memory is None:
            memory = self.sites[site] = SiteMemory()
        self._change(memory, size)
        memory.allocated += size
        memory.allocations += 1
        memory.peak = max(memory.peak, memory.live)
        self._blocks[address] = (memory, size)
        self.live += size
        if self.live > self.peak:
            self.peak, self.peak_time = self.live, time
            self._epoch += 1  # every line holds now what it will hold at this peak
        self.timeline.add(time, self.live)

    def free(self, address: int, time: int) -> bool:
        """The allocation at `address` freed: charged to the line that made it. False when it
        was not seen allocated."""
        block = self._blocks.pop(address, None)
        if block is None:
            self.unmatched_frees += 1
            return False
        memory, size = block
        self._change(memory, -size)
        memory.freed += size
        memory.frees += 1
        self.live -= size
        self.timeline.add(time, self.live)
        return True

    def take(self, events: Iterable[tuple[int, str | None, int, int]]) -> None:
        """Events in order, each (address, site, time, size): an allocation, or with site None
        a free (its size unused)."""
        for address, site, time, size in events:
            if site is None:
                self.free(address, time)
            else:
                self.allocate(site, address, size, time)

    def load(self, state: tuple) -> None:
        """This view as a kname._native_cupti.Ledger's state() has it (that ledger, in C, takes
        the torch tracker's events: memory_hooks.TrackedBlocks): every line's totals and what
        it held at the peak, the peak, the timeline. The blocks held stay there: this ledger is
        read from now on, not given events."""
        lines, self.live, self.peak, self.peak_time, unmatched, untracked, points = state
        self.unmatched_frees, self.untracked = unmatched, untracked
        self._epoch += 1  # each line's at_peak as given, by the lazy rule of at_peak()
        self.sites = {
            name: SiteMemory(allocated, allocations, freed, frees, live, peak, at_peak, self._epoch)
            for name, allocated, allocations, freed, frees, live, peak, at_peak in lines
        }
        self.timeline.points = [(time, live) for time, live in points]

    def at_peak(self, site: str) -> int:
        """Bytes `site` held at the view's peak."""
        memory = self.sites[site]
        return memory._at_peak if memory._epoch == self._epoch else memory.live

    def peak_site(self) -> str | None:
        """The line that held the most at the view's peak (the first such, by name)."""
        held = {site: self.at_peak(site) for site in self.sites}
        best = max(held.values(), default=0)
        return min((s for s, b in held.items() if b == best), default=None) if best else None

    def site_dicts(self) -> dict[str, dict[str, int]]:
        """{site: its JSON form}."""
        return {site: m.as_dict(self.at_peak(site)) for site, m in self.sites.items()}

    def view_dict(self) -> dict[str, object]:
        """The view's process-wide JSON form: peak, its time, the timeline, what was not seen."""
        return {
            "peak": self.peak,
            "peak_ns": self.peak_time,
            "live": self.live,
            "unmatched_frees": self.unmatched_frees,
            "untracked": self.untracked,
            "timeline": [list(point) for point in self.timeline.points],
        }

    def _change(self, memory: SiteMemory, size: int) -> None:
        if memory._epoch != self._epoch:  # not changed since the latest peak: save it first
            memory._at_peak, memory._epoch = memory.live, self._epoch
        memory.live += size
