"""The join kname._native_cupti's recorder keeps in C, read as join.Join is read.

With kname's native CUPTI callback and no external correlation tagging (with --trace too: the
trace is kept in C beside it, native_trace.py), launch records, graph node records and GPU
records meet in C, in CUPTI's thread, by join.py's and graphs.py's rules and within their
bounds (kname/profiling/_cupti_c/join.c, graphs.c): no Python object is made per
record. What the session and the
collector read of that join is here: its counts, and profile() as Join gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kname.profiling.join import KernelTotals, Profile, SiteTotals, add_launch_times


class NativeJoin:
    """Join's read side (launch_count, record_count, profile) over the recorder's C join, and
    over those of the collector's earlier runs (`earlier`: a collector started again gets a
    new recorder, whose totals are added to the last run's)."""

    def __init__(
        self, recorder: Any, memcpy_name: Callable[[int], str], earlier: NativeJoin | None = None
    ) -> None:
        self._recorder = recorder
        self._memcpy_name = memcpy_name
        self._earlier = earlier

    @property
    def launch_count(self) -> int:
        """Launch records the join has been given."""
        earlier = self._earlier.launch_count if self._earlier is not None else 0
        return earlier + self._recorder.join_counts()["launches"]

    @property
    def record_count(self) -> int:
        """GPU records the join has been given."""
        earlier = self._earlier.record_count if self._earlier is not None else 0
        return earlier + self._recorder.join_counts()["records"]

    def counts(self) -> dict[str, int]:
        """Launches and records seen, launches dropped at the bound, each table's size, and
        whether the join trimmed (`trimmed`) or lacked memory (`no_memory`)."""
        return self._recorder.join_counts()

    def profile(self) -> Profile:
        """A snapshot of the totals, as Join.profile() gives them for the same records."""
        sites, unattributed, unmatched, dropped, earlier = self._recorder.join_profile(
            self._memcpy_name
        )
        profile = Profile(
            {name: site_totals(*totals) for name, totals in sites},
            site_totals(*unattributed),
            unmatched,
            dropped,
            earlier,
        )
        return profile if self._earlier is None else summed(self._earlier.profile(), profile)


def summed(first: Profile, then: Profile) -> Profile:
    """The totals of two runs, one after the other (no record of one joins a launch of the
    other: CUPTI's correlation ids only grow)."""
    sites = {name: _plus(SiteTotals(), totals) for name, totals in first.sites.items()}
    for name, totals in then.sites.items():
        sites[name] = _plus(sites.get(name, SiteTotals()), totals)
    return Profile(
        sites,
        _plus(_plus(SiteTotals(), first.unattributed), then.unattributed),
        first.unmatched_launches + then.unmatched_launches,
        first.dropped_launches + then.dropped_launches,
        first.earlier_records + then.earlier_records,
    )


def _plus(totals: SiteTotals, more: SiteTotals) -> SiteTotals:
    if more.first and (not totals.first or more.first < totals.first):
        totals.first = more.first
    for name, kernel in more.kernels.items():
        _add(totals.kernels, name, kernel.launches, kernel.gpu_ns)
        totals.launches += kernel.launches
        totals.gpu_ns += kernel.gpu_ns
    for replay, counts in more.replays.items():
        _add(totals.replays, replay, counts.launches, counts.gpu_ns)
    totals.unseen.launches += more.unseen.launches
    totals.unseen.gpu_ns += more.unseen.gpu_ns
    add_launch_times(totals, more)
    return totals


def site_totals(
    first: int,
    kernels: Iterable[tuple[str, int, int]],
    replays: Iterable[tuple[str, int, int]] = (),
    unseen: tuple[int, int] = (0, 0),
    launch_times: tuple[int, int, int] = (0, 0, 0),
) -> SiteTotals:
    """A site's totals from (kernel name, launches, gpu_ns) counts; counts of the same name
    are one kernel (two copy kinds that CUPTI's enum does not name are both `unknown`). Its graph
    work: (replay site, launches, gpu_ns) counts, and (launches, gpu_ns) replayed here unseen.
    Its launch times: (timed launch calls, their CPU ns, the GPU idle ns they left)."""
    totals = SiteTotals(first=first, unseen=KernelTotals(*unseen))
    totals.launch_calls, totals.launch_cpu_ns, totals.idle_ns = launch_times
    for name, launches, gpu_ns in kernels:
        _add(totals.kernels, name, launches, gpu_ns)
        totals.launches += launches
        totals.gpu_ns += gpu_ns
    for replay, launches, gpu_ns in replays:
        _add(totals.replays, replay, launches, gpu_ns)
    return totals


def _add(into: dict[str, KernelTotals], name: str, launches: int, gpu_ns: int) -> None:
    counts = into.get(name)
    if counts is None:
        counts = into[name] = KernelTotals()
    counts.launches += launches
    counts.gpu_ns += gpu_ns
