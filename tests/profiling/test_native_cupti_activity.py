"""kname._native_cupti reading CUPTI's activity buffers in C, without a GPU.

A stand-in libcupti (tests/support/fake_cupti.c) hands the recorder buffers of activity records
laid out as CUPTI's own structs (by CUPTI's real header where one is installed, see
tests/support/cupti_stand_in.py), at a flush or as CUPTI's thread does when a buffer fills; it
overwrites and frees each kernel name once the buffer is handed over, as the name is CUPTI's.
The records drained must be those CUPTI wrote, the bounds and CUPTI's drops said once, the
collector must drain launches before the records of each buffer, and the join's totals must be
those of the same streams through the Python path (cupti-python's records).
"""

from __future__ import annotations

import os
import sys
import threading
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cupti_stand_in import (
    CONCURRENT_KERNEL,
    CUDA_LAUNCH_KERNEL,
    DRIVER,
    KERNEL,
    RUNTIME,
    StandInBinding,
    memcpy_name,
    queue_record,
)
from support.profile_streams import streams

from kname import hotpath
from kname.profiling import native_callback
from kname.profiling.capture import MEMSET_NAME, LaunchCapture
from kname.profiling.cupti_collector import CuptiCollector
from kname.profiling.join import Join
from kname.profiling.native_callback import NativeCallbacks
from kname.profiling.records import (
    ACTIVITY_KINDS,
    MEMCPY,
    MEMSET,
    ActivityRecord,
    ExternalCorrelation,
    LaunchRecord,
    StreamLog,
)
from kname.profiling.records import KERNEL as KERNEL_WORK

native, _ = hotpath.choose(True).cupti()
APIS = [("cuLaunchKernel", False), ("cudaGraphLaunch", True)]
COPY_KINDS = {"HTOD": 1, "DTOH": 2}  # CUpti_ActivityMemcpyKind
BUFFER_BYTES = 1024  # a few records a buffer: many buffers


class Collecting(SimpleNamespace):
    """A recorder subscribed to the stand-in, its buffers taken, and what it handed over."""

    def drain(self) -> tuple[list[ActivityRecord], list[ExternalCorrelation]]:
        return self.recorder.drain_activities(ActivityRecord, ExternalCorrelation, memcpy_name)


@pytest.fixture
def collecting(cupti, fake_libcupti):
    recorder = native.Recorder(
        apis=APIS, sites={}, kinds={}, site_of_frame=lambda frame: "s", site_key="k",
        no_frame="<no frame>", unnamed="<unnamed>", max_pending=1_000_000, max_open_calls=8,
    )  # fmt: skip
    assert recorder.subscribe(str(fake_libcupti))[0] == 0
    assert recorder.take_activity_buffers(BUFFER_BYTES, 1_000_000, None) == 0
    yield Collecting(recorder=recorder, cupti=cupti.library)
    recorder.release_activity_buffers()
    recorder.unsubscribe()


# --------------------------------------------------------------------------
# The records: what CUPTI wrote, kernel names kept
# --------------------------------------------------------------------------


def test_the_records_drained_are_those_cupti_wrote(collecting):
    cupti = collecting.cupti
    cupti.fake_kernel(CONCURRENT_KERNEL, 5, 100, 250, 7, 1, 0, 0, b"axpy")
    cupti.fake_other(RUNTIME)  # an API record: passed over
    cupti.fake_kernel(KERNEL, 6, 300, 310, 13, 0, 4, 44, b"_Z9scale_rawPfi")
    cupti.fake_memcpy(7, COPY_KINDS["HTOD"], 400, 900, 14, 0, 0, 0)
    cupti.fake_memcpy(8, COPY_KINDS["DTOH"], 1000, 1100, 14, 0, 0, 0)
    cupti.fake_memset(9, 1200, 1210, 7, 0, 3, 33)
    cupti.fake_external(9, 2**40 + 77)
    cupti.fake_other(12345)  # a kind kname does not know at all
    assert collecting.recorder.flush_activities(1) == 0
    assert cupti.fake_buffers_handed_over() == 1 and not cupti.fake_misaligned()
    work, externals = collecting.drain()
    assert work == [
        ActivityRecord(KERNEL_WORK, 5, "axpy", 100, 250, 7, 1, 0),
        ActivityRecord(KERNEL_WORK, 6, "_Z9scale_rawPfi", 300, 310, 13, 0, 4, 44),
        ActivityRecord(MEMCPY, 7, "[memcpy HtoD]", 400, 900, 14, 0, 0),
        ActivityRecord(MEMCPY, 8, "[memcpy DtoH]", 1000, 1100, 14, 0, 0),
        ActivityRecord(MEMSET, 9, MEMSET_NAME, 1200, 1210, 7, 0, 3, 33),
    ]
    assert {record.kind for record in work} <= set(ACTIVITY_KINDS)
    assert externals == [ExternalCorrelation(9, 2**40 + 77)]
    assert collecting.drain() == ([], [])  # drained once
    assert collecting.recorder.activity_counts() == {
        "waiting": 0, "dropped": 0, "cupti_dropped": 0, "names": 2, "names_past_bound": 0,
    }  # fmt: skip


def test_kernel_names_outlive_cuptis_buffer_and_each_is_made_once(collecting):
    cupti = collecting.cupti
    names = [b"axpy", "k\N{GREEK SMALL LETTER ALPHA}<1>".encode(), b"bad \xff utf-8", None]
    for number, name in enumerate(names * 3):
        cupti.fake_kernel(CONCURRENT_KERNEL, number, 0, 1, 7, 0, 0, 0, name)
    collecting.recorder.flush_activities(1)  # the stand-in overwrites and frees the names now
    first, _ = collecting.drain()
    cupti.fake_kernel(CONCURRENT_KERNEL, 99, 0, 1, 7, 0, 0, 0, b"axpy")
    collecting.recorder.flush_activities(1)
    later, _ = collecting.drain()
    expected = ["axpy", "k\N{GREEK SMALL LETTER ALPHA}<1>", "bad \N{REPLACEMENT CHARACTER} utf-8"]
    assert [r.name for r in first] == [*expected, "<unnamed kernel>"] * 3
    assert len({id(r.name) for r in first}) == 4  # one str per name
    assert later[0].name is first[0].name
    assert collecting.recorder.activity_counts()["names"] == 3


def test_records_come_whole_across_many_buffers(collecting):
    cupti = collecting.cupti
    for number in range(1, 501):
        cupti.fake_kernel(CONCURRENT_KERNEL, number, number, number + 7, 7, 0, 0, 0, b"k")
    collecting.recorder.flush_activities(1)
    work, _ = collecting.drain()
    assert [(r.correlation_id, r.duration) for r in work] == [(n, 7) for n in range(1, 501)]
    assert cupti.fake_buffers_handed_over() > 50 and not cupti.fake_misaligned()


# --------------------------------------------------------------------------
# Bounds and drops: counted, and said once by the collector's side
# --------------------------------------------------------------------------


def native_callbacks(collecting, join: Join | None = None) -> NativeCallbacks:
    callbacks = NativeCallbacks(native, LaunchCapture(join or Join()))
    callbacks.recorder = collecting.recorder
    return callbacks


def test_past_the_bound_records_are_counted_and_said_once(collecting, capsys, monkeypatch):
    monkeypatch.setattr(native_callback, "MAX_WAITING_RECORDS", 10)
    callbacks = native_callbacks(collecting)
    assert callbacks.take_activity_buffers(BUFFER_BYTES, lambda: None) == 0
    for number in range(15):
        collecting.cupti.fake_kernel(CONCURRENT_KERNEL, number, 0, 1, 7, 0, 0, 0, b"k")
    callbacks.flush_activities(1)
    assert collecting.recorder.activity_counts()["dropped"] == 5
    work, _ = callbacks.drain_activities(memcpy_name)
    assert [r.correlation_id for r in work] == list(range(10))
    collecting.cupti.fake_kernel(CONCURRENT_KERNEL, 20, 0, 1, 7, 0, 0, 0, b"k")  # room again
    callbacks.flush_activities(1)
    work, _ = callbacks.drain_activities(memcpy_name)
    assert [r.correlation_id for r in work] == [20]
    (line,) = capsys.readouterr().err.splitlines()
    assert "more than 10 GPU records waited to be joined; later ones were not kept" in line


def test_records_cupti_dropped_are_said_once(collecting, capsys):
    callbacks = native_callbacks(collecting)
    collecting.cupti.fake_drop(3)
    collecting.cupti.fake_kernel(CONCURRENT_KERNEL, 1, 0, 1, 7, 0, 0, 0, b"k")
    for _ in range(2):
        callbacks.flush_activities(1)
        callbacks.drain_activities(memcpy_name)
    assert collecting.recorder.activity_counts()["cupti_dropped"] == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert "CUPTI dropped 3 GPU records (no activity buffer was free)" in line


def test_kernel_names_past_their_bound_share_one_name_said_once(collecting, capsys):
    callbacks = native_callbacks(collecting)
    kept = 100_000  # kname._native_cupti's MAX_NAMES
    for start in range(0, kept + 10, 50_000):
        for number in range(start, min(start + 50_000, kept + 10)):
            name = f"kernel_{number}".encode()
            collecting.cupti.fake_kernel(CONCURRENT_KERNEL, number, 0, 1, 7, 0, 0, 0, name)
        callbacks.flush_activities(1)
    work, _ = callbacks.drain_activities(memcpy_name)
    assert len(work) == kept + 10
    assert [r.name for r in work[kept - 1 : kept + 1]] == [
        f"kernel_{kept - 1}",
        "<kname: more kernel names than it keeps>",
    ]
    assert collecting.recorder.activity_counts()["names_past_bound"] == 10
    (line,) = capsys.readouterr().err.splitlines()
    assert f"more than {kept} distinct kernel names" in line


# --------------------------------------------------------------------------
# CUPTI's thread: the hand-over, with the GIL; after release, and after a fork, nothing
# --------------------------------------------------------------------------


def test_a_buffer_read_on_cuptis_thread_is_handed_over_there_with_the_gil(collecting):
    handed = []

    def on_buffer():
        handed.append((threading.get_ident(), collecting.drain()[0]))

    recorder = collecting.recorder
    assert recorder.take_activity_buffers(BUFFER_BYTES, 1_000_000, on_buffer) == 0
    collecting.cupti.fake_complete_on_thread(1)
    collecting.cupti.fake_kernel(CONCURRENT_KERNEL, 1, 0, 5, 7, 0, 0, 0, b"k")
    collecting.cupti.fake_complete()  # as CUPTI's thread does when a buffer fills
    ((thread, work),) = handed
    assert thread != threading.get_ident() and [r.correlation_id for r in work] == [1]

    def broken():
        raise RuntimeError("join failed")

    recorder.take_activity_buffers(BUFFER_BYTES, 1_000_000, broken)
    collecting.cupti.fake_kernel(CONCURRENT_KERNEL, 2, 0, 5, 7, 0, 0, 0, b"k")
    collecting.cupti.fake_complete()
    where, exc = recorder.take_fault()
    assert where == "reading CUPTI's activity records" and str(exc) == "join failed"
    assert [r.correlation_id for r in collecting.drain()[0]] == [2]  # kept all the same


def test_after_release_buffers_are_freed_unread(collecting):
    assert collecting.recorder.release_activity_buffers() is True
    assert collecting.recorder.release_activity_buffers() is False
    collecting.cupti.fake_kernel(CONCURRENT_KERNEL, 1, 0, 5, 7, 0, 0, 0, b"k")
    collecting.cupti.fake_complete()
    assert collecting.cupti.fake_buffers_handed_over() == 1
    assert collecting.recorder.activity_counts()["waiting"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_records_no_gpu_record(collecting):
    cupti = collecting.cupti
    pid = os.fork()
    if pid == 0:  # the child: CUPTI does not follow the fork
        status = 1
        try:
            cupti.fake_kernel(CONCURRENT_KERNEL, 1, 0, 5, 7, 0, 0, 0, b"k")
            cupti.fake_complete()
            counts = collecting.recorder.activity_counts()
            if cupti.fake_buffers_handed_over() == 1 and counts["waiting"] == 0:
                status = 0
        finally:
            os._exit(status)
    assert os.waitpid(pid, 0)[1] == 0
    cupti.fake_kernel(CONCURRENT_KERNEL, 2, 0, 5, 7, 0, 0, 0, b"k")  # the parent still records
    cupti.fake_complete()
    assert [r.correlation_id for r in collecting.drain()[0]] == [2]


# --------------------------------------------------------------------------
# The collector: launches first, then each buffer's records; the Python path's totals
# --------------------------------------------------------------------------


class OrderedJoin(Join):
    """A join that notes what came in, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, list[int]]] = []

    def add_launch(self, record: LaunchRecord) -> None:
        self.events.append(("launch", [record.correlation_id]))
        super().add_launch(record)

    def add_activities(self, records) -> None:
        records = list(records)
        self.events.append(("records", [r.correlation_id for r in records]))
        super().add_activities(records)


def test_the_collector_hands_each_buffer_over_after_the_launches_and_flushes_at_stop(
    cupti, fake_libcupti, monkeypatch, capsys
):
    cupti = cupti.library
    binding = StandInBinding()
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=binding))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: str(fake_libcupti))
    join, log = OrderedJoin(), StreamLog()
    # Tagging wrapped launches keeps the Python join (untagged, the join is in C: no hand-over).
    collector = CuptiCollector(
        LaunchCapture(join, log), join, log, buffer_bytes=BUFFER_BYTES, external_correlation=True
    )
    assert collector.start() and not binding.registered  # not cupti-python's buffers
    assert collector.activity_reader == "native"
    recorder = collector._callbacks.recorder
    cupti.fake_complete_on_thread(1)

    def launch(number: int) -> None:
        recorder.mark(f"site {number}")
        cupti.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
        cupti.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
        recorder.unmark()

    for number in (1, 2):
        launch(number)
        cupti.fake_kernel(CONCURRENT_KERNEL, number, 10, 30, 7, 0, 0, 0, b"k")
    cupti.fake_complete()  # a buffer fills: CUPTI's thread hands it over
    launch(3)
    cupti.fake_memcpy(3, COPY_KINDS["DTOH"], 40, 45, 7, 0, 0, 0)
    cupti.fake_external(3, 77)
    collector.stop()  # flushed: the last buffer, after its launch
    assert [event for event in join.events if event[1]] == [
        ("launch", [1]), ("launch", [2]), ("records", [1, 2]), ("launch", [3]), ("records", [3]),
    ]  # fmt: skip
    sites = join.profile().sites
    assert {name: totals.gpu_ns for name, totals in sites.items()} == {
        "site 1": 20, "site 2": 20, "site 3": 5,
    }  # fmt: skip
    assert list(sites["site 3"].kernels) == ["[memcpy DtoH]"]
    assert [r.correlation_id for r in log.activities] == [1, 2, 3]
    assert log.externals == [ExternalCorrelation(3, 77)]
    cupti.fake_kernel(CONCURRENT_KERNEL, 4, 0, 5, 7, 0, 0, 0, b"k")  # after stop: freed unread
    cupti.fake_complete()
    assert recorder.activity_counts()["waiting"] == 0 and join.record_count == 3
    assert collector.activity_counts() == recorder.activity_counts()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kname: profile: collecting through kname's native CUPTI callback")


def python_path_join(stream, chunk: int) -> Join:
    """What the Python path's join is given for `stream`: each launch at its call, then the
    records in buffers of `chunk`."""
    join = Join()
    for launch in stream.launches:
        join.add_launch(launch)
    for i in range(0, len(stream.activities), chunk):
        join.add_activities(stream.activities[i : i + chunk])
    return join


def native_path_join(collecting, stream, early: frozenset[int] = frozenset()) -> Join:
    """The same stream through the native recorder: launch calls made (a nested one inside its
    outer call, each site marked as a wrapped launch marks it), records read from buffers. The
    records of the `early` top-level calls (by their order) come while the call is still open:
    they wait in the join for the launch record, which the recorder hands over at its exit."""
    join = Join()
    callbacks = native_callbacks(collecting, join)
    recorder = collecting.recorder

    def completed() -> None:
        callbacks.drain()
        join.add_activities(callbacks.drain_activities(memcpy_name)[0])

    assert callbacks.take_activity_buffers(BUFFER_BYTES, completed) == 0
    inner_of = {launch.parent: launch for launch in stream.launches if launch.parent}
    waiting = list(stream.activities)
    for number, launch in enumerate(c for c in stream.launches if not c.parent):
        recorder.mark(launch.site)
        recorder.enter(launch.correlation_id, 1 if launch.graph else 0, launch.start)
        inner = inner_of.get(launch.correlation_id)
        if inner is not None:
            recorder.enter(inner.correlation_id, 0, inner.start)
        if number in early:
            family = {launch.correlation_id, inner.correlation_id if inner else 0}
            for record in waiting:
                if record.correlation_id in family:
                    queue_record(collecting.cupti, record)
            waiting = [r for r in waiting if r.correlation_id not in family]
            callbacks.flush_activities(1)
        if inner is not None:
            recorder.exit(inner.correlation_id, inner.end)
        recorder.exit(launch.correlation_id, launch.end)
        recorder.unmark()
    for record in waiting:
        queue_record(collecting.cupti, record)
    callbacks.flush_activities(1)
    callbacks.drain()
    return join


@given(stream=streams())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_the_totals_are_those_of_the_same_streams_through_the_python_path(collecting, stream):
    collecting.cupti.fake_reset_activity()
    native_profile = native_path_join(collecting, stream).profile()
    # A buffer of BUFFER_BYTES holds 4 kernel records of CUPTI 13.0 (216 bytes), or more of
    # kname's own (prefix) layout: the join does not depend on how records are chunked.
    assert native_profile == python_path_join(stream, 4).profile()


@given(stream=streams(), early=st.frozensets(st.integers(0, 30)))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_records_handed_over_before_their_launch_call_ends_still_find_its_site(
    collecting, stream, early
):
    collecting.cupti.fake_reset_activity()
    native_profile = native_path_join(collecting, stream, early).profile()
    assert totals(native_profile) == totals(python_path_join(stream, 4).profile())


def totals(profile) -> tuple:
    """Per site and kernel: GPU records and time, and each site's first correlation id."""
    sites = dict(profile.sites, **{"<unattributed>": profile.unattributed})
    return (
        {
            name: (s.first, {k: (v.launches, v.gpu_ns) for k, v in s.kernels.items()})
            for name, s in sites.items()
            if s.launches
        },
        profile.earlier_records,
    )


def test_a_recorder_of_no_launch_api_holds_the_buffers_and_frees_them_unread(cupti, fake_libcupti):
    """The least a CUPTI-based profiler pays for its records (benchmarks/profile_cost.py's
    floor): a recorder with no launch API subscribed, its buffers released, read by nobody."""
    cupti = cupti.library
    recorder = native.Recorder(
        apis=[], sites={}, kinds={}, site_of_frame=lambda frame: "s", site_key="k",
        no_frame="<no frame>", unnamed="<unnamed>", max_pending=10, max_open_calls=8,
    )  # fmt: skip
    assert recorder.subscribe(str(fake_libcupti))[0] == 0
    assert recorder.take_activity_buffers(BUFFER_BYTES, 1, None) == 0
    assert recorder.release_activity_buffers()
    with pytest.raises(IndexError):
        recorder.enable(DRIVER, CUDA_LAUNCH_KERNEL, 0)
    cupti.fake_kernel(CONCURRENT_KERNEL, 1, 0, 5, 7, 0, 0, 0, b"k")
    assert recorder.flush_activities(1) == 0 and cupti.fake_buffers_handed_over() == 1
    assert recorder.activity_counts()["waiting"] == 0 and recorder.unsubscribe() == 0
