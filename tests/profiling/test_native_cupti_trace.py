"""The trace kname._native_cupti keeps in C (native_trace.py), against trace.py's, without a GPU.

trace.py is the specification. Streams are built by hypothesis as CUPTI produces them
(tests/support/profile_streams.py: nested runtime and driver calls on several threads, graphs
captured,
cloned, updated, replayed and freed, copies and sets, untimed records, records with no launch).
They go through the real native path: launch calls through the recorder, each on a thread of its
own as the stream says (a thread's launches on one real thread), graph node events made by the
stand-in libcupti as CUPTI's resource callbacks, GPU records in its buffers; the recorder joins
them in C and keeps them for the trace. The JSON the recorder writes must be, character for
character, what trace.py writes for the same records in the order the recorder kept them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cupti_stand_in import (
    CONCURRENT_KERNEL,
    CUDA_LAUNCH_KERNEL,
    DRIVER,
    StandInBinding,
    fire_graph_event,
    joining_recorder,
    memcpy_name,
    queue_record,
)
from support.profile_streams import SITE_NAMES, graph_programs, hostile_names, streams

import kname
from kname import hotpath
from kname.profiling import cupti_collector, native_callback
from kname.profiling.graphs import MAX_NODES, RECENT_NODES
from kname.profiling.join import MAX_PENDING, RECENT_WINDOW
from kname.profiling.native_callback import NativeCallbacks
from kname.profiling.native_trace import NativeTrace
from kname.profiling.records import (
    NODE_CREATED,
    ActivityRecord,
    GraphNodeRecord,
    LaunchRecord,
    Streams,
)
from kname.profiling.session import ProfileSession
from kname.profiling.trace import trace_json

native, _ = hotpath.choose(True).cupti()
# Every (API, graph launch) pair the strategies use, by the recorder's api index.
APIS = [("cudaLaunchKernel", False), ("cudaLaunchKernel", True), ("cuLaunchKernel", False),
        ("cudaGraphLaunch", True)]  # fmt: skip
API_INDEX = {pair: index for index, pair in enumerate(APIS)}
META = {"pid": 4242, "program": "python app.py --steps 3"}


@pytest.fixture(scope="module")
def threads():
    """Three threads that stay: a stream's thread 1, 2 and 3 (their idents are the trace's)."""
    pools = {number: ThreadPoolExecutor(max_workers=1) for number in (1, 2, 3)}
    yield pools
    for pool in pools.values():
        pool.shutdown()


def new_recorder(cupti, max_records: int = 2_000_000):
    """A recorder on the stand-in, joining in C and keeping the trace, CUPTI's graph resource
    callbacks enabled."""
    bounds = (MAX_PENDING, RECENT_WINDOW, MAX_NODES, RECENT_NODES)
    return joining_recorder(native, cupti, APIS, 1 << 16, bounds, trace=max_records)


class Traced:
    """Streams through the recorder, and the same records as the Python trace reads them."""

    def __init__(self, cupti, threads, max_records: int = 2_000_000) -> None:
        self.cupti = cupti.library
        self.threads = threads
        self.recorder = new_recorder(cupti, max_records)
        self.trace = NativeTrace(self.recorder, memcpy_name)
        self.kept = Streams(meta=dict(META))  # what the recorder keeps, in its order

    def launch(self, outer: LaunchRecord, inner: LaunchRecord | None = None) -> None:
        """A launch call made at its site on its thread (a driver call inside it, which
        returns first); the recorder keeps each as it returns."""
        pool = self.threads[outer.thread]
        ident = pool.submit(self._launch_here, outer, inner).result()
        if inner is not None:
            self.kept.launches.append(replace(inner, thread=ident))
        self.kept.launches.append(replace(outer, thread=ident))

    def _launch_here(self, outer: LaunchRecord, inner: LaunchRecord | None) -> int:
        recorder = self.recorder
        recorder.mark(outer.site)
        recorder.enter(outer.correlation_id, API_INDEX[outer.api, outer.graph], outer.start)
        if inner is not None:
            recorder.enter(inner.correlation_id, API_INDEX[inner.api, inner.graph], inner.start)
            recorder.exit(inner.correlation_id, inner.end)
        recorder.exit(outer.correlation_id, outer.end)
        recorder.unmark()
        return threading.get_ident()

    def graph_node(self, record: GraphNodeRecord) -> None:
        """CUPTI's graph resource callback; a node made inside the launch kname wraps there."""
        if record.event == NODE_CREATED:
            self.recorder.mark(record.site)
        assert fire_graph_event(self.cupti, record) == 1
        if record.event == NODE_CREATED:
            self.recorder.unmark()
        self.kept.graph_nodes.append(record)

    def buffer(self, records: list[ActivityRecord]) -> None:
        for record in records:
            queue_record(self.cupti, record)
        self.recorder.flush_activities(1)
        self.kept.activities.extend(records)

    def close(self) -> None:
        self.recorder.join_now()
        self.recorder.release_activity_buffers()
        self.recorder.unsubscribe()


def through_the_recorder(traced: Traced, stream: Streams, sizes: list[int]) -> None:
    inner_of = {launch.parent: launch for launch in stream.launches if launch.parent}
    for launch in stream.launches:
        if not launch.parent:
            traced.launch(launch, inner_of.get(launch.correlation_id))
    records = list(stream.activities)
    for size in sizes:
        traced.buffer(records[:size])
        records = records[size:]
    traced.buffer(records)
    traced.close()


def assert_same_trace(traced: Traced) -> None:
    text = traced.trace.trace_json(META)
    assert text == trace_json(traced.kept)
    json.loads(text)  # and it is JSON
    streams = traced.trace.streams()
    assert streams.launches == traced.kept.launches
    assert streams.activities == traced.kept.activities
    assert streams.graph_nodes == traced.kept.graph_nodes


@given(stream=streams(), sizes=st.lists(st.integers(0, 6), max_size=4))
@settings(
    max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_the_c_trace_is_trace_pys_for_the_same_streams(cupti, threads, stream, sizes):
    traced = Traced(cupti, threads)
    through_the_recorder(traced, stream, sizes)
    assert_same_trace(traced)


@given(program=graph_programs())
@settings(
    max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_the_c_trace_names_graph_replays_as_trace_py_does(cupti, threads, program):
    """Replayed kernels named by their capture line, the replay line and the graph's ids in
    their args, `capture_seen` false for nodes whose making was not seen."""
    traced = Traced(cupti, threads)
    for event in program.events:
        if isinstance(event, LaunchRecord):
            traced.launch(event)
        elif isinstance(event, GraphNodeRecord):
            traced.graph_node(event)
        else:
            traced.buffer(event)
    traced.close()
    assert_same_trace(traced)


@given(
    sites=st.lists(st.one_of(hostile_names, st.sampled_from(SITE_NAMES)), min_size=1, max_size=4),
    kernels=st.lists(
        st.text(min_size=1, max_size=12).filter(lambda k: "\x00" not in k), min_size=1
    ),
)
@settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_names_with_quotes_controls_and_surrogates_are_written_as_json_writes_them(
    cupti, threads, sites, kernels
):
    kernels = [
        k for k in kernels if k.encode("utf-8", "surrogatepass") == k.encode("utf-8", "replace")
    ]
    traced = Traced(cupti, threads)
    for number, site in enumerate(sites, 1):
        traced.launch(
            LaunchRecord(number, 1, site, "cuLaunchKernel", 1_000 * number, 1_000 * number + 7)
        )
    work = [
        ActivityRecord("kernel", 1 + n % len(sites), kernel, 9_000 + n, 9_500 + n, 7)
        for n, kernel in enumerate(kernels)
    ]
    traced.buffer(work)
    traced.close()
    assert traced.trace.trace_json(META) == trace_json(traced.kept)


@pytest.mark.parametrize(
    "ns", [0, 1, 999, 1_000, 1_001, 1_010, 1_100, 123_456_789, 2**43 * 1000 - 1, 2**43 * 1000,
           2**43 * 1000 + 1, 2**53 + 1, 2**60 + 12_345, 2**63 + 777],
)  # fmt: skip
def test_times_print_as_pythons_round_and_repr_print_them(cupti, threads, ns):
    """µs with three decimals: printed exactly below 2**43 µs, by Python's own steps above."""
    traced = Traced(cupti, threads)
    traced.launch(LaunchRecord(1, 1, "a.py:1", "cuLaunchKernel", 1, 2))
    traced.buffer([ActivityRecord("kernel", 1, "k", 1 + ns, 1 + ns + ns // 7, 7)])
    traced.close()
    assert traced.trace.trace_json(META) == trace_json(traced.kept)


# --------------------------------------------------------------------------
# Bounded, and no Python object per record
# --------------------------------------------------------------------------


def test_past_its_cap_the_trace_keeps_nothing_more_and_counts_what_it_dropped(cupti, threads):
    traced = Traced(cupti, threads, max_records=5)
    for number in range(1, 5):
        traced.launch(
            LaunchRecord(number, 1, "a.py:1", "cuLaunchKernel", 10 * number, 10 * number + 1)
        )
    traced.buffer([ActivityRecord("kernel", n, "k", 100 + n, 105 + n, 7) for n in range(1, 5)])
    traced.close()
    assert traced.trace.counts() == {
        "launches": 4, "graph_nodes": 0, "records": 1, "dropped": 3, "max_records": 5,
    }  # fmt: skip
    kept = Streams(traced.kept.launches, traced.kept.activities[:1], meta=dict(META))
    assert traced.trace.trace_json(META) == trace_json(kept)
    assert traced.trace.streams().meta["dropped_records"] == 3


def test_records_kept_for_the_trace_make_no_python_object(cupti):
    recorder = new_recorder(cupti)
    library = cupti.library
    recorder.mark("step app.py:3")
    for correlation_id in range(1, 20_001):
        recorder.enter(correlation_id, 2, correlation_id)
        recorder.exit(correlation_id, correlation_id + 1)
        library.fake_kernel(CONCURRENT_KERNEL, correlation_id, 0, 3, 7, 0, 0, 0, b"k")
    recorder.unmark()
    tracemalloc.start()
    try:
        recorder.flush_activities(1)  # 20 000 launch calls and GPU records joined and kept
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000  # bytes: not one Python object per record
    assert recorder.trace_counts()["launches"] == recorder.trace_counts()["records"] == 20_000
    recorder.release_activity_buffers()
    recorder.unsubscribe()


# --------------------------------------------------------------------------
# The collector and the session, end to end through the stand-in libcupti
# --------------------------------------------------------------------------


@pytest.fixture
def stand_in_cupti(cupti, monkeypatch):
    """cupti-python replaced by the stand-in binding, and libcupti by the stand-in library."""
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    cupti.library.fake_reset_activity()
    return cupti


def launched(session: ProfileSession, cupti, sites: list[str], first: int = 1) -> None:
    """Launch calls at these sites (as wrapped launches mark them), with correlation ids from
    `first`, and their kernels."""
    recorder = session.collector._callbacks.recorder
    for number, site in enumerate(sites, first):
        recorder.mark(site)
        cupti.library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
        cupti.library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
        recorder.unmark()
        cupti.library.fake_kernel(
            CONCURRENT_KERNEL, number, 50 + number, 60 + number, 7, 0, 0, 0, b"k"
        )


def test_a_session_with_a_trace_writes_it_from_c_as_trace_py_writes_its_streams(stand_in_cupti):
    session = ProfileSession(keep_streams=True)
    assert session.start()
    launched(session, stand_in_cupti, ["a.py:1", "b.py:2", "a.py:1"])
    session.stop()
    assert session.collector.trace is not None and not session.log.kept  # nothing in Python
    text = session._trace_text()
    assert text == trace_json(session.streams())
    names = [e["name"] for e in json.loads(text)["traceEvents"] if e["ph"] == "X"]
    assert names == ["cuLaunchKernel"] * 3 + ["a.py:1 / k", "b.py:2 / k", "a.py:1 / k"]


def nested_launches(session: ProfileSession, cupti, site: str, count: int) -> None:
    """Launch calls at `site`, each with a launch call made inside it (as the runtime calls the
    driver), the kernel carrying the outer call's correlation id."""
    recorder, fire = session.collector._callbacks.recorder, cupti.library.fake_callback
    for number in range(1, count + 1):
        recorder.mark(site)
        fire(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
        fire(DRIVER, CUDA_LAUNCH_KERNEL, 0, 1000 + number)
        fire(DRIVER, CUDA_LAUNCH_KERNEL, 1, 1000 + number)
        fire(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
        recorder.unmark()
        cupti.library.fake_kernel(
            CONCURRENT_KERNEL, number, 50 + number, 60 + number, 7, 0, 0, 0, b"k"
        )


@pytest.mark.parametrize(
    ("keep_streams", "verdict", "stamps", "timed_calls"),
    [
        (False, False, 0, None),  # nothing reads a launch call's time: none taken
        (False, True, 20, 10),  # the verdict: enter and exit of the outer call
        (True, False, 40, None),  # the trace: of the call inside it too, for the trace alone
        (True, True, 40, 10),  # both
    ],
)
def test_launch_calls_are_timed_where_the_verdict_or_a_trace_reads_the_times(
    stand_in_cupti, keep_streams, verdict, stamps, timed_calls
):
    session = ProfileSession(keep_streams=keep_streams, verdict=verdict)
    assert session.start()
    nested_launches(session, stand_in_cupti, "a.py:1", 10)
    assert stand_in_cupti.library.fake_timestamps_taken() == stamps
    session.stop()
    (site,) = session.document()["sites"]
    # With the verdict, each outer call once, at its kernel's line; the document is the same
    # with or without the trace.
    assert site.get("launch_times", {}).get("calls") == timed_calls


def test_a_trace_past_its_cap_is_valid_json_said_once_with_what_it_dropped(stand_in_cupti, capsys):
    session = ProfileSession(keep_streams=True, max_records=4)
    assert session.start()
    launched(session, stand_in_cupti, ["a.py:1"] * 3)
    session.stop()
    assert session.collector.trace is not None  # kept in C
    session._trace_text()
    events = json.loads(session._trace_text())["traceEvents"]
    assert len([e for e in events if e["ph"] == "X"]) == 4
    lines = [line for line in capsys.readouterr().err.splitlines() if "the trace keeps" in line]
    assert lines == [
        "kname: profile: the trace keeps at most 4 records (launch calls, GPU records, graph "
        "node events; KNAME_PROFILE_TRACE_MAX); 2 later ones are not in it"
    ]


def test_a_session_started_again_keeps_at_most_its_cap_over_every_run(stand_in_cupti, capsys):
    session = ProfileSession(keep_streams=True, max_records=5)
    for run in range(3):
        assert session.start()
        launched(session, stand_in_cupti, [f"run{run}.py:1"] * 2, first=1 + 10 * run)
        session.stop()
    events = json.loads(session._trace_text())["traceEvents"]
    assert len([e for e in events if e["ph"] == "X"]) == 5
    assert "5 records (launch calls" in capsys.readouterr().err
    assert session.streams().meta["dropped_records"] == 3 * 4 - 5


def test_a_session_started_again_keeps_the_first_runs_trace(stand_in_cupti):
    session = ProfileSession(keep_streams=True)
    for run in range(2):
        assert session.start()
        launched(session, stand_in_cupti, [f"run{run}.py:1"], first=1 + 10 * run)
        session.stop()
    streams = session.streams()
    assert [launch.site for launch in streams.launches] == ["run0.py:1", "run1.py:1"]
    events = json.loads(session._trace_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") == "kernel"] == [
        "run0.py:1 / k",
        "run1.py:1 / k",
    ]


TARGET = '''
"""A GPU library kname wraps (KNAME_TARGETS): each launch calls the stand-in libcupti's CUDA
API, whose callback runs inside the launch kname wrapped."""
LIBRARY = None
NEXT = [0]


def launch(gpu_ns):
    NEXT[0] += 1
    number = NEXT[0]
    LIBRARY.fake_callback(1, 307, 0, number)
    LIBRARY.fake_callback(1, 307, 1, number)
    LIBRARY.fake_kernel(10, number, 1000 * number, 1000 * number + gpu_ns, 7, 0, 0, 0, b"axpy")
'''


@pytest.mark.launches
def test_launches_kname_wraps_on_either_hot_path_are_traced_in_c_as_in_python(
    stand_in_cupti, hot_path, tmp_path, monkeypatch
):
    """The launch wrapper (C or Python) hands its site to the native recorder, which traces
    the launch in C as trace.py traces the same streams."""
    (tmp_path / "tracedlib.py").write_text(TARGET)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tracedlib", raising=False)
    monkeypatch.setattr(cupti_collector, "choose", lambda capture: NativeCallbacks(native, capture))
    import tracedlib

    tracedlib.LIBRARY = stand_in_cupti.library
    kname.install(targets=["tracedlib:launch"])
    with kname.profile(keep_streams=True) as profile:
        for gpu_ns in (300, 500):
            tracedlib.launch(gpu_ns)  # L:traced
    assert profile.collector.trace is not None
    text = profile._trace_text()
    assert text == trace_json(profile.streams())
    kernels = [e for e in json.loads(text)["traceEvents"] if e.get("cat") == "kernel"]
    (site,) = {e["args"]["site"] for e in kernels}
    assert site.endswith(f"test_native_cupti_trace.py:{line_of_marker('L:traced')}")
    assert [e["dur"] for e in kernels] == [0.3, 0.5]


def line_of_marker(marker: str) -> int:
    with open(__file__, encoding="utf-8") as source:
        return next(n for n, line in enumerate(source, 1) if line.rstrip().endswith(f"# {marker}"))


COUNTED = '''
"""A GPU library kname wraps, whose launch notes what it sees of kname while it runs."""
import sys

from kname import callsite

LIBRARY = None
SEEN = []


def launch(number):
    (site,) = [s for s in callsite.sites.values() if type(s.push).__name__ == "SiteCall"]
    SEEN.append(sys.getrefcount(site))  # one more while kname holds it: not a cached launch
    LIBRARY.fake_callback(1, 307, 0, number)
    LIBRARY.fake_callback(1, 307, 1, number)
'''


@pytest.mark.parametrize("hot_path", ["native"], indirect=True)
def test_a_wrapped_launch_while_a_profile_collects_is_a_cached_launch(
    stand_in_cupti, hot_path, tmp_path, monkeypatch
):
    """The push and pop kname profile gives a wrapped site (the recorder's C site calls) are run
    by the C wrapper's cached launch, as an NVTX range is: no reference taken, no call made; the
    site still marked for the CUPTI callback inside, and unmarked after."""
    (tmp_path / "countedlib.py").write_text(COUNTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "countedlib", raising=False)
    import countedlib

    countedlib.LIBRARY = stand_in_cupti.library
    kname.install(targets=["countedlib:launch"])
    with kname.profile(keep_streams=True) as profile:
        for number in range(1, 6):
            countedlib.launch(number)  # L:counted
        stand_in_cupti.library.fake_callback(1, 307, 0, 99)  # after the launches: no mark left
        stand_in_cupti.library.fake_callback(1, 307, 1, 99)
    launches = profile.streams().launches
    named = f"test_native_cupti_trace.py:{line_of_marker('L:counted')}"
    assert [launch.site.endswith(named) for launch in launches] == [True] * 5 + [False]
    # The first two launches took every step, holding the site (a new site; then the table of
    # recent look-ups filled); the others none.
    first, cached = countedlib.SEEN[0], countedlib.SEEN[2:]
    assert cached == [first - 1] * 3


def test_a_command_line_of_undecodable_bytes_loses_no_trace(stand_in_cupti, monkeypatch, tmp_path):
    """sys.argv keeps bytes that are not UTF-8 as lone surrogates (os.fsdecode): the trace the
    C recorder keeps is still written, those bytes shown as escapes, as trace.py shows them."""
    monkeypatch.setattr(sys, "argv", ["app.py", os.fsdecode(b"--out=r\xe9sultats")])
    session = ProfileSession(keep_streams=True)
    assert session.start()
    launched(session, stand_in_cupti, ["a.py:1"])
    session.stop()
    assert session.collector.trace is not None and not session.log.kept  # written in C
    session.save_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))["traceEvents"]
    (track,) = [e for e in events if e["name"] == "process_name" and e["pid"] < 1 << 30]
    assert track["args"]["name"].startswith("CPU: app.py --out=r\\xe9sultats (pid ")
    assert (tmp_path / "trace.json").read_text() == trace_json(session.streams())
