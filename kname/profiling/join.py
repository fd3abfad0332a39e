"""The join: each GPU activity record goes to the call site of the API call that caused it.

CUPTI gives an activity record the correlation id of the launch API call behind it; the launch
callback recorded that call's site under the same id. Kernels, copies and sets of a CUDA graph
carry the correlation id of the graph launch (cuGraphLaunch/cudaGraphLaunch) and the id of the
graph node they ran as: each goes to the line that made its node (graphs.py: the launch captured
into the graph, or the line that added the node), with the line that replayed the graph kept as
its parent (`replays`); a node kname did not see made stays with the replay line, counted apart
(`unseen`). Totals are kept per site and per kernel within a site: launches (GPU records) and
gpu_ns (their device time, end - start).

Memory stays bounded on long runs: a launch's entry leaves the pending table when its GPU record
arrives (graph launches stay until the end: their kernels keep arriving), and is kept a little
longer in a small window of recently joined ids, for a second record of the same call (a
multi-device launch, a driver call made inside a runtime call). Past MAX_PENDING entries the
oldest pending ones are dropped, said once. External correlations (CUPTI's link from an API
call inside a launch kname wraps to that launch's site) are kept only for calls no launch
record names, and in a window of the same size as the recent ids.

This is also the specification of the join kname._native_cupti keeps in C for the native path
where nothing is tagged (native_join.py): the same tables and steps, the same Profile.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kname._locks import new_lock
from kname._warnings import warn_once
from kname.profiling.graphs import MAX_NODES, RECENT_NODES, GraphNodes
from kname.profiling.launch_times import LaunchTimes
from kname.profiling.records import (
    ActivityRecord,
    ExternalCorrelation,
    GraphNodeRecord,
    LaunchRecord,
    Streams,
)

MAX_PENDING = 1_000_000
RECENT_WINDOW = 65_536
UNATTRIBUTED = "<unattributed>"


@dataclass
class KernelTotals:
    """One kernel (or copy, or set) at one site."""

    launches: int = 0
    gpu_ns: int = 0


@dataclass
class SiteTotals:
    """Everything attributed to one call site."""

    launches: int = 0
    gpu_ns: int = 0
    first: int = 0  # the smallest correlation id attributed: the site's first-seen rank
    kernels: dict[str, KernelTotals] = field(default_factory=dict)
    # Of the above, the graph work made at this site, by the site that replayed its graph.
    replays: dict[str, KernelTotals] = field(default_factory=dict)
    # Of the above, graph work replayed here whose node kname did not see made.
    unseen: KernelTotals = field(default_factory=KernelTotals)
    # The launch-bound verdict's numbers (launch_times.py): timed launch calls, their CPU time,
    # and the GPU idle time they left.
    launch_calls: int = 0
    launch_cpu_ns: int = 0
    idle_ns: int = 0

    def add(self, record: ActivityRecord) -> None:
        """Count one GPU record."""
        duration = record.duration
        self.launches += 1
        self.gpu_ns += duration
        if not self.first or record.correlation_id < self.first:
            self.first = record.correlation_id
        kernel = self.kernels.get(record.name)
        if kernel is None:
            kernel = self.kernels[record.name] = KernelTotals()
        kernel.launches += 1
        kernel.gpu_ns += duration

    def add_replayed(self, record: ActivityRecord, replay: str) -> None:
        """Count one GPU record of a graph node made here, replayed at `replay`."""
        self.add(record)
        totals = self.replays.get(replay)
        if totals is None:
            totals = self.replays[replay] = KernelTotals()
        totals.launches += 1
        totals.gpu_ns += record.duration

    def add_unseen(self, record: ActivityRecord) -> None:
        """Count one GPU record of a graph replayed here, its node's making not seen."""
        self.add(record)
        self.unseen.launches += 1
        self.unseen.gpu_ns += record.duration

    def copy(self) -> SiteTotals:
        """An independent copy (a snapshot while records keep arriving)."""
        kernels = {k: KernelTotals(v.launches, v.gpu_ns) for k, v in self.kernels.items()}
        replays = {k: KernelTotals(v.launches, v.gpu_ns) for k, v in self.replays.items()}
        unseen = KernelTotals(self.unseen.launches, self.unseen.gpu_ns)
        copied = SiteTotals(self.launches, self.gpu_ns, self.first, kernels, replays, unseen)
        add_launch_times(copied, self)
        return copied


def add_launch_times(totals: SiteTotals, more: SiteTotals) -> None:
    """`more`'s launch times added to `totals`'."""
    totals.launch_calls += more.launch_calls
    totals.launch_cpu_ns += more.launch_cpu_ns
    totals.idle_ns += more.idle_ns


class Attribution(NamedTuple):
    """Where one GPU record goes: its site, and for graph work the line that replayed it."""

    site: str
    replayed_at: str = ""  # "" unless graph work
    capture_seen: bool = True  # False: graph work whose node kname did not see made


@dataclass
class Profile:
    """The join's result: GPU time per call site, and what could not be attributed."""

    sites: dict[str, SiteTotals]
    unattributed: SiteTotals  # GPU records whose launch was never seen (should not happen)
    unmatched_launches: int = 0  # launch calls that got no GPU record (e.g. during graph capture)
    dropped_launches: int = 0  # pending launches dropped at the bound
    earlier_records: int = 0  # GPU work launched before the first launch seen: left out

    @property
    def total_gpu_ns(self) -> int:
        """Device time of every GPU record, attributed or not."""
        return sum(s.gpu_ns for s in self.sites.values()) + self.unattributed.gpu_ns

    @property
    def total_launches(self) -> int:
        """Every GPU record, attributed or not."""
        return sum(s.launches for s in self.sites.values()) + self.unattributed.launches


class Join:
    """Launch records in (any thread), activity records in (CUPTI's thread), totals out."""

    def __init__(
        self,
        max_pending: int = MAX_PENDING,
        recent_window: int = RECENT_WINDOW,
        max_nodes: int = MAX_NODES,
        recent_nodes: int = RECENT_NODES,
    ):
        self.max_pending = max_pending
        self.recent_window = recent_window
        self._pending: dict[int, LaunchRecord] = {}
        self._children: dict[int, list[int]] = {}  # parent correlation id -> nested calls
        self._recent: OrderedDict[int, str] = OrderedDict()  # joined id -> site
        self._graphs_seen: set[int] = set()  # graph launches that got at least one record
        # correlation id -> external id, for API calls no launch record names (bounded).
        self._externals: OrderedDict[int, int] = OrderedDict()
        self._external_sites: dict[int, str] = {}  # external id -> site
        self._orphans: dict[int, list[ActivityRecord]] = {}  # records waiting for their launch
        self._orphan_count = 0
        self._sites: dict[str, SiteTotals] = {}
        self._dropped = 0
        self._first = 0  # the smallest correlation id of a launch seen (CUPTI's ids only grow)
        self.launch_count = 0  # launch records seen
        self.record_count = 0  # activity records seen
        self.nodes = GraphNodes(max_nodes, recent_nodes)
        self.launch_times = LaunchTimes(max_pending)
        self._lock = new_lock()  # freed in a forked child, whoever held it
        # Graph node records come on the threads that make graphs, while CUPTI's thread may hold
        # _lock for a whole buffer: their own lock, and the join reads the table without one.
        self._nodes_lock = new_lock()

    def add_launch(self, record: LaunchRecord) -> None:
        """A launch API call and its site. Called on the launching thread: no lock taken."""
        self.launch_times.launch(record)  # first: its GPU records may be waiting (_adopt)
        self.launch_count += 1
        if not self._first or record.correlation_id < self._first:
            self._first = record.correlation_id
        # Single dict and list operations are atomic under the GIL; only the rare trim locks.
        self._pending[record.correlation_id] = record
        if record.parent:
            self._children.setdefault(record.parent, []).append(record.correlation_id)
        if self._orphans and record.correlation_id in self._orphans:
            # Its GPU records came first (the launch record was handed over late: the native
            # callback keeps a call until its exit, and a buffer may complete before that).
            self._adopt(record.correlation_id)
        if len(self._pending) > self.max_pending:
            self._trim()

    def add_graph_node(self, record: GraphNodeRecord) -> None:
        """A graph node made, cloned, updated or destroyed (when CUPTI said so)."""
        with self._nodes_lock:
            self.nodes.add(record)

    def add_activities(self, records: Iterable[ActivityRecord]) -> None:
        """GPU records (one CUPTI buffer's worth): attribute each to its site."""
        with self._lock:
            for record in records:
                self.record_count += 1
                site = self._site_of(record.correlation_id)
                if site is None:
                    self._park(record)
                else:
                    self._count(site, record)

    def add_externals(
        self, records: Iterable[ExternalCorrelation], sites: Mapping[int, str] | None = None
    ) -> None:
        """Links from API calls to ids kname pushed around wrapped launches, and their sites."""
        with self._lock:
            if sites:
                self._external_sites.update(sites)
            for record in records:
                known = (
                    record.correlation_id in self._pending or record.correlation_id in self._recent
                )
                if known:
                    continue  # a launch record names it already
                # Every API call inside a wrapped launch gets one, most of them launch nothing.
                self._externals[record.correlation_id] = record.external_id
                if len(self._externals) > self.recent_window:
                    self._externals.popitem(last=False)
                self._adopt(record.correlation_id)

    def site_of(self, correlation_id: int) -> str | None:
        """The site a record with this correlation id would go to now, without consuming it."""
        launch = self._pending.get(correlation_id)
        if launch is not None:
            return launch.site
        if correlation_id in self._recent:
            return self._recent[correlation_id]
        external = self._externals.get(correlation_id)
        return None if external is None else self._external_sites.get(external)

    def attribution(self, record: ActivityRecord) -> Attribution:
        """Where `record` would go now, without consuming anything (for the trace)."""
        site = self.site_of(record.correlation_id) or UNATTRIBUTED
        if not (record.graph_node_id or record.graph_id):
            return Attribution(site)
        capture = self.nodes.charged(
            record.graph_node_id, record.graph_id, record.correlation_id, site
        )
        if capture is None:
            return Attribution(site, site, capture_seen=False)
        return Attribution(capture, site)

    def profile(self) -> Profile:
        """A snapshot of the totals; records still waiting for their launch count unattributed.

        Records older than every launch seen belong to work launched before collection
        started (still running when it did): they are left out, and counted.
        """
        with self._lock:
            sites = {name: totals.copy() for name, totals in self._sites.items()}
            unattributed = sites.pop(UNATTRIBUTED, None) or SiteTotals()
            earlier = 0
            for orphan in itertools.chain.from_iterable(self._orphans.values()):
                if self._first and orphan.correlation_id >= self._first:
                    unattributed.add(orphan)
                else:
                    earlier += 1
            pending = list(self._pending.values())
            unmatched = sum(
                1
                for launch in pending
                if not (launch.graph and launch.correlation_id in self._graphs_seen)
            )
            return Profile(sites, unattributed, unmatched, self._dropped, earlier)

    def _site_of(self, correlation_id: int) -> str | None:
        launch = self._pending.get(correlation_id)
        if launch is not None:
            if launch.graph:
                self._graphs_seen.add(correlation_id)
            else:
                self._retire(launch)
            return launch.site
        site = self._recent.get(correlation_id)
        if site is not None:
            return site
        external = self._externals.pop(correlation_id, None)
        if external is not None:
            site = self._external_sites.get(external, UNATTRIBUTED)
            self._remember(correlation_id, site)
            return site
        return None

    def _retire(self, launch: LaunchRecord) -> None:
        """Joined: the launch and the calls nested around it leave the pending table."""
        family = [launch.correlation_id, *self._children.pop(launch.correlation_id, ())]
        if launch.parent:
            family += [launch.parent, *self._children.pop(launch.parent, ())]
        for correlation_id in family:
            if self._pending.pop(correlation_id, None) is not None:
                self._remember(correlation_id, launch.site)

    def _remember(self, correlation_id: int, site: str) -> None:
        self._recent[correlation_id] = site
        if len(self._recent) > self.recent_window:
            self._recent.popitem(last=False)

    def _adopt(self, correlation_id: int) -> None:
        """The records parked under `correlation_id` go to the site it now has."""
        with self._lock:
            waiting = self._orphans.pop(correlation_id, None)
            if waiting:
                self._orphan_count -= len(waiting)
                for orphan in waiting:
                    self._count(self._site_of(orphan.correlation_id) or UNATTRIBUTED, orphan)

    def _count(self, site: str, record: ActivityRecord) -> None:
        """Count `record`, launched at `site`: graph work goes to the line that made its node."""
        if not (record.graph_node_id or record.graph_id):
            totals = self._totals(site)
            totals.add(record)
            self.launch_times.count(totals, record, graph=False)
            return
        capture = self.nodes.charged(
            record.graph_node_id, record.graph_id, record.correlation_id, site
        )
        if capture is None:
            totals = self._totals(site)
            totals.add_unseen(record)
        else:
            totals = self._totals(capture)
            totals.add_replayed(record, site)
        self.launch_times.count(totals, record, graph=True)

    def _park(self, record: ActivityRecord) -> None:
        if self._orphan_count >= self.max_pending:
            self._totals(UNATTRIBUTED).add(record)  # past the bound: counted, not kept
            return
        self._orphans.setdefault(record.correlation_id, []).append(record)
        self._orphan_count += 1

    def _totals(self, site: str) -> SiteTotals:
        totals = self._sites.get(site)
        if totals is None:
            totals = self._sites[site] = SiteTotals()
        return totals

    def _trim(self) -> None:
        with self._lock:
            excess = len(self._pending) - self.max_pending
            if excess <= 0:
                return
            # The oldest tenth goes at once, so trimming is rare; dicts keep insertion order.
            count = max(excess, self.max_pending // 10)
            for correlation_id in list(itertools.islice(iter(self._pending), count)):
                self._pending.pop(correlation_id, None)
                self._children.pop(correlation_id, None)
            self._dropped += count
        say_pending_dropped(self.max_pending)


def say_pending_dropped(max_pending: int) -> None:
    """Said once: launches waiting for their GPU records were dropped at the bound."""
    warn_once(
        "profile:pending",
        f"profile: more than {max_pending} launches are waiting for their GPU records; the "
        "oldest were dropped, and GPU work they still cause counts as unattributed",
    )


def replay(streams: Streams) -> Profile:
    """The join's result for recorded streams (a fixture, or what a session logged)."""
    join = replay_join(streams)
    join.add_activities(streams.activities)
    return join.profile()


def replay_join(streams: Streams) -> Join:
    """A join that holds every launch, external correlation and graph node of `streams` (none
    dropped, destroyed nodes kept for the records that come after)."""
    join = Join(
        max_pending=len(streams.launches) + 1,
        recent_window=max(RECENT_WINDOW, len(streams.externals) + len(streams.launches) + 1),
        max_nodes=len(streams.graph_nodes) + 1,
        recent_nodes=len(streams.graph_nodes) + 1,
    )
    join.launch_times.on = streams.timed_calls  # before format 3: not the launch's own time
    for launch in streams.launches:
        join.add_launch(launch)
    for node in streams.graph_nodes:
        join.add_graph_node(node)
    join.add_externals(streams.externals, streams.external_sites)
    return join
