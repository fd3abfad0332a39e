"""The join kname._native_cupti keeps in C (native_join.py), against join.py's, without a GPU.

join.py is the specification. Streams are built by hypothesis as CUPTI produces them
(tests/support/profile_streams.py: nesting parents, graphs, copies and sets, records with no launch,
work from before collection), then interleaved (records handed over before their launch call
ends), repeated (the same launch or record twice), tagged (external correlations) and bounded
(small pending and recent tables). They go through the real native path: launch calls through
the recorder (each site marked as a wrapped launch marks it), GPU records in buffers of the
stand-in libcupti (tests/support/fake_cupti.c), joined in C as each buffer completes. The Python
Join is given the same records at the same moments; the Profiles, the counts and the size of
every table must be the same.
"""

from __future__ import annotations

import copy
import random
import sys
import tracemalloc
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cupti_stand_in import (
    CONCURRENT_KERNEL,
    CUDA_GRAPH_LAUNCH,
    CUDA_LAUNCH_KERNEL,
    DRIVER,
    RUNTIME,
    StandInBinding,
    fire_graph_event,
    joining_recorder,
    memcpy_name,
    queue_record,
)
from support.profile_streams import graph_programs, profiles, streams

from kname import hotpath
from kname.profiling import native_callback
from kname.profiling.capture import LaunchCapture
from kname.profiling.cupti_collector import CuptiCollector
from kname.profiling.graphs import MAX_NODES, RECENT_NODES
from kname.profiling.join import RECENT_WINDOW, UNATTRIBUTED, Join, KernelTotals
from kname.profiling.native_join import NativeJoin, site_totals, summed
from kname.profiling.records import (
    EXEC_DESTROYED,
    KERNEL,
    NODE_CLONED,
    NODE_CREATED,
    NODE_EVENTS,
    ActivityRecord,
    ExternalCorrelation,
    GraphNodeRecord,
    LaunchRecord,
)
from kname.profiling.session import ProfileSession

native, _ = hotpath.choose(True).cupti()
APIS = [("cuLaunchKernel", False), ("cudaGraphLaunch", True)]
BUFFER_BYTES = 1 << 16


def new_recorder(
    cupti,
    max_pending: int = 1_000_000,
    recent_window: int = RECENT_WINDOW,
    max_nodes: int = MAX_NODES,
    recent_nodes: int = RECENT_NODES,
):
    """A recorder on the stand-in, joining in C with these bounds, with CUPTI's graph resource
    callbacks enabled."""
    bounds = (max_pending, recent_window, max_nodes, recent_nodes)
    return joining_recorder(native, cupti, APIS, BUFFER_BYTES, bounds)


def close(recorder) -> None:
    recorder.release_activity_buffers()
    recorder.unsubscribe()


# --------------------------------------------------------------------------
# Both joins, given the same events
# --------------------------------------------------------------------------


class Both:
    """The C join (through the recorder and the stand-in's buffers) and join.py's, fed alike."""

    def __init__(
        self,
        cupti,
        max_pending: int,
        recent_window: int,
        max_nodes: int = MAX_NODES,
        recent_nodes: int = RECENT_NODES,
    ) -> None:
        self.cupti = cupti.library
        self.recorder = new_recorder(cupti, max_pending, recent_window, max_nodes, recent_nodes)
        self.native = NativeJoin(self.recorder, memcpy_name)
        self.python = Join(max_pending, recent_window, max_nodes, recent_nodes)
        self.finished: list[LaunchRecord] = []  # launch records the recorder holds, in order
        self.nodes: list[GraphNodeRecord] = []  # graph node records the recorder holds

    def launch(self, outer: LaunchRecord, inner: LaunchRecord | None) -> None:
        """A launch call (with the driver call made inside it), at its own times: the recorder
        keeps the calls until the next buffer, inner one first (it returns first)."""
        recorder = self.recorder
        recorder.mark(outer.site)
        recorder.enter(outer.correlation_id, 1 if outer.graph else 0, outer.start)
        if inner is not None:
            recorder.enter(inner.correlation_id, 0, inner.start)
            recorder.exit(inner.correlation_id, inner.end)
            self.finished.append(inner)
        recorder.exit(outer.correlation_id, outer.end)
        recorder.unmark()
        self.finished.append(outer)

    def graph_node(self, record: GraphNodeRecord) -> None:
        """CUPTI's graph resource callback for `record`, on this thread; a node made there is
        made inside the launch kname wraps at its site (so the recorder names it so)."""
        if record.event == NODE_CREATED:
            self.recorder.mark(record.site)
        assert fire_graph_event(self.cupti, record) == 1
        if record.event == NODE_CREATED:
            self.recorder.unmark()
        self.nodes.append(record)

    def buffer(self, records: list[ActivityRecord | ExternalCorrelation]) -> None:
        """A buffer completes: the launches finished so far and the graph node records, then
        its external correlations, then its work (as the collector gives them to join.py)."""
        for record in records:
            queue_record(self.cupti, record)
        self.recorder.flush_activities(1)
        self.join_launches()
        self.python.add_externals([r for r in records if isinstance(r, ExternalCorrelation)])
        self.python.add_activities([r for r in records if isinstance(r, ActivityRecord)])

    def join_launches(self) -> None:
        for launch in self.finished:
            self.python.add_launch(launch)
        self.finished.clear()
        for node in self.nodes:
            self.python.add_graph_node(node)
        self.nodes.clear()

    def end(self) -> None:
        self.recorder.join_now()
        self.join_launches()
        close(self.recorder)


def tables(join: Join) -> dict[str, int]:
    """The size of each of join.py's tables, named as the C join's counts name them."""
    return {
        "launches": join.launch_count,
        "records": join.record_count,
        "pending": len(join._pending),
        "children": len(join._children),
        "recent": len(join._recent),
        "externals": len(join._externals),
        "orphans": join._orphan_count,
        "graphs": len(join._graphs_seen),
    }


@st.composite
def events(draw):
    """A stream's launch calls and records, interleaved as CUPTI may hand them over, with some
    repeated and some external correlations; and the join's bounds."""
    stream = draw(streams())
    inner_of = {launch.parent: launch for launch in stream.launches if launch.parent}
    units = [
        ("launch", (c, inner_of.get(c.correlation_id))) for c in stream.launches if not c.parent
    ]
    records: list = list(stream.activities)
    ids = [launch.correlation_id for launch in stream.launches] or [1]
    for _ in range(draw(st.integers(0, 4))):  # links from API calls to an external id
        records.append(ExternalCorrelation(draw(st.sampled_from(ids)) + draw(st.integers(0, 1)), 7))
    if records and draw(st.booleans()):  # a record handed over twice
        records.append(draw(st.sampled_from(records)))
    if units and draw(st.booleans()):  # a launch call recorded twice (the same ids)
        units.append(draw(st.sampled_from(units)))
    order = draw(st.permutations(range(len(records))))
    timeline = list(units)
    for index in order:  # each record anywhere among the launch calls
        timeline.insert(draw(st.integers(0, len(timeline))), ("record", records[index]))
    small = draw(st.booleans())
    # Bounds that make the join trim (a tenth at once from 10 up), park past its bound, and
    # forget recent ids.
    max_pending = draw(st.sampled_from([1, 2, 3, 5, 8, 10, 13, 20, 30])) if small else 1_000_000
    recent_window = draw(st.integers(1, 8)) if small else RECENT_WINDOW
    return timeline, max_pending, recent_window, draw(st.integers(1, 4))


@given(scenario=events())
@settings(
    max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_the_c_join_gives_join_pys_profile_for_the_same_records(cupti, scenario):
    timeline, max_pending, recent_window, per_buffer = scenario
    both = Both(cupti, max_pending, recent_window)
    waiting: list = []
    for kind, event in timeline:
        if kind == "launch":
            both.launch(*event)
            continue
        waiting.append(event)
        if len(waiting) == per_buffer:  # a buffer of up to per_buffer records completes
            both.buffer(waiting)
            waiting = []
    if waiting:
        both.buffer(waiting)
    both.end()
    assert both.native.profile() == both.python.profile()
    counts = both.native.counts()
    assert {name: counts[name] for name in tables(both.python)} == tables(both.python)
    assert counts["dropped"] == both.python.profile().dropped_launches
    assert bool(counts["trimmed"]) == bool(both.python._dropped) and not counts["no_memory"]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_c_join_agrees_on_a_long_run_of_scattered_ids(cupti, seed):
    """Ids from all over their range (CUPTI's only grow, but the tables must not rely on it):
    every table of the C join grows, compacts and collides, as join.py's dicts never do."""
    chance = random.Random(seed)
    both = Both(cupti, 2_000, 300)
    ids = [chance.randrange(1, 2**32) for _ in range(6_000)]
    ids += chance.sample(ids, 500)  # launched twice
    waiting: list = []
    for number, correlation_id in enumerate(ids):
        site = f"site {correlation_id % 11}"
        inner = None
        if number % 5 == 0:
            inner = LaunchRecord(chance.randrange(1, 2**32), 1, site, parent=correlation_id)
        both.launch(LaunchRecord(correlation_id, 1, site, graph=number % 17 == 0), inner)
        for _ in range(chance.choice([0, 1, 1, 1, 2])):
            carrier = inner if inner is not None and chance.random() < 0.5 else None
            record_id = carrier.correlation_id if carrier else chance.choice(ids[: number + 1])
            start = chance.randrange(0, 10**6)
            waiting.append(ActivityRecord(KERNEL, record_id, f"k{number % 3}", start, start + 9))
        if len(waiting) >= 40:
            chance.shuffle(waiting)
            both.buffer(waiting)
            waiting = []
    both.buffer(waiting)
    both.end()
    assert both.native.profile() == both.python.profile()
    counts = both.native.counts()
    assert {name: counts[name] for name in tables(both.python)} == tables(both.python)


def test_a_site_named_unattributed_is_the_unattributed_site(cupti):
    both = Both(cupti, 1_000_000, RECENT_WINDOW)
    both.launch(LaunchRecord(1, 1, UNATTRIBUTED), None)
    both.buffer([ActivityRecord(KERNEL, 1, "k", 0, 5), ActivityRecord(KERNEL, 9, "k", 0, 7)])
    both.end()
    profile = both.native.profile()
    assert profile == both.python.profile() and not profile.sites
    assert (profile.unattributed.launches, profile.unattributed.gpu_ns) == (2, 12)


@given(program=graph_programs(), small=st.booleans())
@settings(
    max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_the_c_join_attributes_graph_replays_as_join_py_does(cupti, program, small):
    """Synthetic graph programs (tests/support/profile_streams.py), their callbacks made by the
    stand-in
    libcupti as CUPTI makes them: the same Profile, replays and unseen work included, with
    bounds small enough for the cap on live nodes and the window of destroyed ones."""
    max_nodes, recent_nodes = (3, 2) if small else (MAX_NODES, RECENT_NODES)
    both = Both(cupti, 1_000_000, RECENT_WINDOW, max_nodes, recent_nodes)
    for event in program.events:
        if isinstance(event, LaunchRecord):
            both.launch(event, None)
        elif isinstance(event, GraphNodeRecord):
            both.graph_node(event)
        else:
            both.buffer(event)
    both.end()
    assert both.native.profile() == both.python.profile()
    counts = both.native.counts()
    nodes = both.python.nodes
    assert (counts["nodes"], counts["nodes_kept"]) == (nodes.live, nodes.kept)
    assert counts["nodes_not_kept"] == nodes.not_kept and not counts["no_memory"]
    if not small:
        assert both.native.profile().sites.keys() == program.expected.keys() - {UNATTRIBUTED}


def test_graph_node_records_drained_from_the_recorder_are_those_cupti_reported(cupti):
    recorder = new_recorder(cupti)
    recorder.mark("layer model.py:21")
    recorder.enter(7, 0, 1)  # a launch call captured: the node is made inside it
    recorder.unmark()
    made = GraphNodeRecord(NODE_CREATED, 2**40 + 1, 3, 0, 0, "", 0)
    fire_graph_event(cupti.library, made)
    recorder.exit(7, 2)
    clone = GraphNodeRecord(NODE_CLONED, 2**40 + 2, 0, 9, 2**40 + 1, "", 0)
    fire_graph_event(cupti.library, clone)
    fire_graph_event(cupti.library, GraphNodeRecord(EXEC_DESTROYED, graph_exec=9))
    drained = recorder.drain_graph_nodes(GraphNodeRecord)
    assert drained == [
        GraphNodeRecord(NODE_CREATED, 2**40 + 1, 3, 0, 0, "layer model.py:21", 7),
        GraphNodeRecord(NODE_CLONED, 2**40 + 2, 0, 9, 2**40 + 1, "", 7),
        GraphNodeRecord(EXEC_DESTROYED, 0, 0, 9, 0, "", 7),
    ]
    assert recorder.drain_graph_nodes(GraphNodeRecord) == []
    assert native.GRAPH_EVENTS == NODE_EVENTS
    close(recorder)


def test_a_node_added_outside_any_launch_call_is_named_after_the_running_frame(cupti):
    recorder = new_recorder(cupti)  # its site_of_frame names every frame "s"
    fire_graph_event(cupti.library, GraphNodeRecord(NODE_CREATED, 5, 1))
    (record,) = recorder.drain_graph_nodes(GraphNodeRecord)
    assert record.site == "s"
    close(recorder)


@given(first=profiles(), then=profiles())
def test_two_runs_summed_count_every_record_of_both_once(first, then):
    before = copy.deepcopy((first, then))
    both = summed(first, then)
    assert (first, then) == before  # the runs' own totals are left as they were
    assert both.total_gpu_ns == first.total_gpu_ns + then.total_gpu_ns
    assert both.total_launches == first.total_launches + then.total_launches
    for name in {*first.sites, *then.sites}:
        parts = [p.sites[name] for p in (first, then) if name in p.sites]
        site = both.sites[name]
        assert site.first == min(part.first for part in parts if part.first)
        for kernel in {k for part in parts for k in part.kernels}:
            counted = [part.kernels[kernel] for part in parts if kernel in part.kernels]
            assert site.kernels[kernel].launches == sum(k.launches for k in counted)
            assert site.kernels[kernel].gpu_ns == sum(k.gpu_ns for k in counted)


def test_copy_kinds_named_alike_are_one_kernel():
    totals = site_totals(3, [("[memcpy unknown]", 1, 5), ("k", 2, 1), ("[memcpy unknown]", 2, 4)])
    assert {k: (v.launches, v.gpu_ns) for k, v in totals.kernels.items()} == {
        "[memcpy unknown]": (3, 9), "k": (2, 1),
    }  # fmt: skip
    assert (totals.first, totals.launches, totals.gpu_ns) == (3, 5, 10)


# --------------------------------------------------------------------------
# Bounded memory, and no Python object per record
# --------------------------------------------------------------------------


def test_memory_stays_bounded_on_a_long_run(cupti):
    recorder = new_recorder(cupti, max_pending=100, recent_window=50)
    library = cupti.library
    for correlation_id in range(1, 20_001):
        recorder.mark(f"site {correlation_id % 7}")
        recorder.enter(correlation_id, 0, 0)
        recorder.exit(correlation_id, 0)
        library.fake_kernel(CONCURRENT_KERNEL, correlation_id, 0, 1, 7, 0, 0, 0, b"k")
        if correlation_id % 50 == 0:  # a buffer of 50: fewer launches wait than the bound
            recorder.flush_activities(1)
            counts = recorder.join_counts()
            assert counts["pending"] <= 100 and counts["recent"] <= 50 and not counts["orphans"]
    recorder.unmark()
    for correlation_id in range(30_001, 31_001):  # launches whose records never come
        recorder.enter(correlation_id, 0, 0)
        recorder.exit(correlation_id, 0)
    recorder.join_now()
    counts = recorder.join_counts()
    assert counts["pending"] <= 100 and counts["trimmed"]
    profile = NativeJoin(recorder, memcpy_name).profile()
    assert profile.total_launches == 20_000
    assert profile.dropped_launches + profile.unmatched_launches == 1000
    close(recorder)


def test_records_joined_in_c_make_no_python_object(cupti):
    recorder = new_recorder(cupti)
    library = cupti.library
    recorder.mark("step app.py:3")
    for correlation_id in range(1, 20_001):
        recorder.enter(correlation_id, 0, 0)
        recorder.exit(correlation_id, 0)
        library.fake_kernel(CONCURRENT_KERNEL, correlation_id, 0, 3, 7, 0, 0, 0, b"k")
    recorder.unmark()
    tracemalloc.start()
    try:
        recorder.flush_activities(1)  # 20 000 launch records and GPU records joined
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000  # bytes: not one Python object per record
    site = NativeJoin(recorder, memcpy_name).profile().sites["step app.py:3"]
    assert (site.launches, site.gpu_ns, site.first) == (20_000, 60_000, 1)
    close(recorder)


# --------------------------------------------------------------------------
# The collector and the session: the join in C where nothing is logged or tagged
# --------------------------------------------------------------------------


def run_session(cupti, keep_streams: bool) -> ProfileSession:
    """A session through the stand-in: three launch calls, their records in two buffers."""
    library = cupti.library
    library.fake_reset_activity()
    session = ProfileSession(keep_streams=keep_streams)
    assert session.start()
    recorder = session.collector._callbacks.recorder
    library.fake_complete_on_thread(1)
    for number, site in ((1, "a.py:1"), (2, "b.py:2"), (3, "a.py:1")):
        recorder.mark(site)
        library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
        library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
        recorder.unmark()
        library.fake_kernel(
            CONCURRENT_KERNEL, number, 10 * number, 10 * number + 4, 7, 0, 0, 0, b"k"
        )
        if number == 2:
            library.fake_complete()  # on CUPTI's thread, as a buffer fills
    library.fake_memcpy(3, 1, 100, 109, 7, 0, 0, 0)
    session.stop()
    return session


def test_a_session_without_streams_keeps_its_totals_in_c_and_the_same_document(cupti, monkeypatch):
    binding = StandInBinding()
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=binding))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    in_c = run_session(cupti, keep_streams=False)
    assert isinstance(in_c.join, NativeJoin) and in_c.collector.totals is in_c.join
    assert (in_c.join.launch_count, in_c.join.record_count) == (3, 4)
    traced = run_session(cupti, keep_streams=True)  # --trace: the join in C too, the trace kept
    assert isinstance(traced.join, NativeJoin) and traced.collector.trace is not None
    assert in_c.collector.trace is None
    assert in_c.document() == traced.document()
    sites = {site["name"]: site["gpu_ns"] for site in in_c.sites}
    assert sites == {"a.py:1": 4 + 4 + 9, "b.py:2": 4}


def test_a_tagging_collector_keeps_the_python_join(cupti, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    cupti.library.fake_reset_activity()
    join = Join()
    collector = CuptiCollector(LaunchCapture(join), join, external_correlation=True)
    assert collector.start() and collector.activity_reader == "native"
    assert collector.totals is join
    collector.stop()


def test_what_the_c_join_dropped_at_its_bound_is_said_once_at_stop(cupti, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    monkeypatch.setattr(native_callback, "MAX_PENDING", 5)
    cupti.library.fake_reset_activity()
    join = Join()
    collector = CuptiCollector(LaunchCapture(join), join)
    assert collector.start() and isinstance(collector.totals, NativeJoin)
    recorder = collector._callbacks.recorder
    recorder.mark("idle app.py:1")
    for number in range(1, 21):  # launches whose records never come
        cupti.library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
        cupti.library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
        if number % 3 == 0:  # a buffer of other records: the launches go to the join
            cupti.library.fake_other(RUNTIME)
            cupti.library.fake_complete()
    recorder.unmark()
    collector.stop()
    profile = collector.totals.profile()
    assert profile.dropped_launches + profile.unmatched_launches == 20
    assert profile.unmatched_launches <= 5 and join.launch_count == 0  # all of it in C
    lines = capsys.readouterr().err.splitlines()
    assert len([line for line in lines if "more than 5 launches are waiting" in line]) == 1


@pytest.mark.parametrize("keep_streams", [False, True], ids=["join in C", "trace in C"])
def test_the_collector_ties_replayed_kernels_to_the_line_that_captured_them(
    cupti, monkeypatch, keep_streams
):
    """The collector's whole native path, on the stand-in: CUPTI's graph callbacks subscribed,
    a node made inside a captured launch, cloned at instantiation, then a replay's kernels."""
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    cupti.library.fake_reset_activity()
    session = ProfileSession(keep_streams=keep_streams)
    assert session.start()
    recorder = session.collector._callbacks.recorder
    library = cupti.library
    for correlation_id, site, api in (
        (1, "layer model.py:21", CUDA_LAUNCH_KERNEL),
        (2, "run runner.py:26", CUDA_GRAPH_LAUNCH),
    ):
        recorder.mark(site)
        library.fake_callback(DRIVER, api, 0, correlation_id)
        if correlation_id == 1:  # captured: the graph's node is made inside the launch call
            fire_graph_event(library, GraphNodeRecord(NODE_CREATED, 40, 3))
            fire_graph_event(library, GraphNodeRecord(NODE_CLONED, 41, 3, 8, 40))
        library.fake_callback(DRIVER, api, 1, correlation_id)
        recorder.unmark()
    library.fake_kernel(CONCURRENT_KERNEL, 2, 0, 30, 7, 0, 8, 41, b"gemm")  # the replay's
    library.fake_kernel(CONCURRENT_KERNEL, 2, 0, 5, 7, 0, 8, 99, b"add")  # a node not seen
    session.stop()
    assert isinstance(session.join, NativeJoin)  # with the trace kept (in C) too
    sites = session.join.profile().sites
    assert sites["layer model.py:21"].replays == {"run runner.py:26": KernelTotals(1, 30)}
    assert sites["run runner.py:26"].unseen == KernelTotals(1, 5)
    assert set(sites) == {"layer model.py:21", "run runner.py:26"}
    if keep_streams:
        assert [n.event for n in session.streams().graph_nodes] == [NODE_CREATED, NODE_CLONED]


def test_a_collector_started_again_goes_on_from_its_last_runs_totals(cupti, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    cupti.library.fake_reset_activity()
    join = Join()
    collector = CuptiCollector(LaunchCapture(join), join)
    for run, (first, sites) in enumerate([(1, ("a.py:1", "b.py:2")), (10, ("a.py:1",))]):
        assert collector.start()
        recorder = collector._callbacks.recorder
        for number, site in enumerate(sites, first):
            recorder.mark(site)
            cupti.library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
            cupti.library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
            recorder.unmark()
            cupti.library.fake_kernel(CONCURRENT_KERNEL, number, 0, 10 + run, 7, 0, 0, 0, b"k")
        cupti.library.fake_kernel(CONCURRENT_KERNEL, 99, 0, 1, 7, 0, 0, 0, b"lost")
        collector.stop()
    totals = collector.totals
    profile = totals.profile()
    assert {name: (s.launches, s.gpu_ns, s.first) for name, s in profile.sites.items()} == {
        "a.py:1": (2, 10 + 11, 1), "b.py:2": (1, 10, 2),
    }  # fmt: skip
    assert (profile.unattributed.launches, profile.unattributed.first) == (2, 99)
    assert (totals.launch_count, totals.record_count) == (3, 5)


def test_records_cupti_dropped_are_said_once_at_stop_with_the_join_in_c(cupti, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    cupti.library.fake_reset_activity()
    join = Join()
    collector = CuptiCollector(LaunchCapture(join), join)
    assert collector.start() and isinstance(collector.totals, NativeJoin)
    cupti.library.fake_drop(3)  # no buffer was free: CUPTI counts what it lost
    cupti.library.fake_kernel(CONCURRENT_KERNEL, 1, 0, 5, 7, 0, 0, 0, b"k")
    cupti.library.fake_complete()
    collector.stop()
    lines = capsys.readouterr().err.splitlines()
    said = [line for line in lines if "CUPTI dropped 3 GPU records" in line]
    assert len(said) == 1
