"""kname profile --memory on the native path: kname._native_cupti reads CUPTI's memory records in
C and keeps memory API calls apart from the launches, without a GPU.

A stand-in libcupti (tests/support/fake_cupti.c) hands the recorder buffers with MEMORY2 records
laid out as CUPTI's CUpti_ActivityMemory4 (by CUPTI's real header where one is installed, see
tests/support/cupti_stand_in.py). memory_join.MemoryCalls in front of join.py's Join is the
specification: given the same calls and records, the C path (the join in C keeping the memory
calls apart, Recorder.drain_memory handing over those and the memory records alone) must give
the same ledgers, and the C join the launch counts of join.py's. A recording made on the GPU
(tests/data/memory_*.json) replays through the C recorder to the bytes of its live run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cupti_stand_in import (
    CONCURRENT_KERNEL,
    CUDA_FREE,
    CUDA_LAUNCH_KERNEL,
    CUDA_MALLOC,
    DRIVER,
    StandInBinding,
    joining_recorder,
    memcpy_name,
    queue_memory,
)

from kname import hotpath
from kname.profiling import native_callback
from kname.profiling.join import RECENT_WINDOW, Join
from kname.profiling.memory_join import (
    DEVICE,
    PINNED,
    MemoryCalls,
    memory_api,
    memory_kinds,
    native_memory_records,
    replay_memory,
)
from kname.profiling.native_join import NativeJoin
from kname.profiling.records import (
    ALLOCATION,
    RELEASE,
    LaunchRecord,
    MemoryRecord,
    load_streams,
)
from kname.profiling.session import ProfileSession

native, _ = hotpath.choose(True).cupti()
KERNEL_API, MALLOC_API, FREE_API = 0, 1, 2
RUNTIME_API = 2  # CUPTI's callback domain of the runtime's API
APIS = [("cuLaunchKernel", False), ("cudaMalloc", False), ("cudaFree", False)]
KINDS = memory_kinds(StandInBinding)
BOUNDS = (1_000_000, RECENT_WINDOW, 64, 64)
MIB = 1 << 20
DATA = Path(__file__).parent.parent / "data"
# Streams recorded on a GPU (memory_profile_*.json are profiles, not streams).
MEMORY_FIXTURES = [p for p in sorted(DATA.glob("memory_*.json")) if "_profile_" not in p.name]


def memory_recorder(cupti, apis=APIS, keep=True):
    """A recorder on the stand-in joining in C, reading memory records when `keep`."""
    recorder = joining_recorder(native, cupti, apis, 1024, BOUNDS)
    if keep:
        recorder.keep_memory(bytes(memory_api(name) for name, _ in apis), 1_000_000)
    return recorder


def close(recorder) -> None:
    recorder.release_activity_buffers()
    recorder.unsubscribe()


def call(recorder, correlation_id: int, api: int, site: str) -> None:
    """One API call from `site` (marked as a wrapped launch marks it), entered and returned."""
    recorder.mark(site)
    recorder.enter(correlation_id, api, 0)
    recorder.exit(correlation_id, 0)
    recorder.unmark()


def drained(recorder, calls: MemoryCalls) -> int:
    """What the recorder kept for the memory join, handed to `calls` as the collector hands it
    (its calls, then its records); how many it did not keep."""
    memory_calls, rows, dropped = recorder.drain_memory()
    calls.add_calls(memory_calls)
    calls.add_memory(native_memory_records(rows, KINDS))
    return dropped


def ledgers(calls: MemoryCalls) -> dict:
    return {view: (kept.site_dicts(), kept.view_dict()) for view, kept in calls.ledgers.items()}


# --------------------------------------------------------------------------
# The records and the calls
# --------------------------------------------------------------------------


def test_memory_records_are_read_in_c_as_cupti_wrote_them(cupti):
    recorder = memory_recorder(cupti)
    library = cupti.library
    library.fake_memory(5, 1, 3, 0x7F0000, 8 * MIB, 111, 0, 7, 0)
    library.fake_kernel(CONCURRENT_KERNEL, 6, 100, 250, 7, 0, 0, 0, b"axpy")
    library.fake_memory(9, 2, 2, 2**48 + 4096, 2 * MIB, 222, 1, 2**32 - 1, 1)
    library.fake_memory(10, 1, 5, 0x900000, 4096, 333, 0, 3, 0)
    assert recorder.flush_activities(1) == 0
    calls, rows, dropped = recorder.drain_memory()
    assert (calls, dropped) == ([], 0)
    assert native_memory_records(rows, KINDS) == [
        MemoryRecord(5, ALLOCATION, "device", 0x7F0000, 8 * MIB, 111, 0, 7, False),
        MemoryRecord(9, RELEASE, "pinned", 2**48 + 4096, 2 * MIB, 222, 1, 2**32 - 1, True),
        MemoryRecord(10, ALLOCATION, "managed", 0x900000, 4096, 333, 0, 3, False),
    ]
    assert recorder.drain_memory() == ([], [], 0)  # drained once
    assert NativeJoin(recorder, memcpy_name).record_count == 1  # the kernel: joined in C
    close(recorder)


def test_without_memory_on_the_memory_records_are_passed_over_and_calls_are_launches(cupti):
    recorder = memory_recorder(cupti, keep=False)
    call(recorder, 1, MALLOC_API, "alloc.py:3")
    cupti.library.fake_memory(1, 1, 3, 0x100, MIB, 10, 0, 7, 0)
    recorder.flush_activities(1)
    recorder.join_now()
    assert recorder.drain_memory() == ([], [], 0)
    assert NativeJoin(recorder, memcpy_name).launch_count == 1
    close(recorder)


def test_the_c_join_keeps_memory_calls_apart_from_launches_as_memory_calls_does(cupti):
    recorder = memory_recorder(cupti)
    python = MemoryCalls(Join())
    for number, api, site in (
        (1, MALLOC_API, "alloc.py:3"),
        (2, KERNEL_API, "step.py:9"),
        (3, FREE_API, "free.py:5"),
        (4, MALLOC_API, "later.py:1"),  # its record never comes: nothing to charge
    ):
        call(recorder, number, api, site)
        python.add_launch(LaunchRecord(number, 7, site, APIS[api][0]))
    records = [
        MemoryRecord(1, ALLOCATION, "device", 0x100, 64 * MIB, 10),
        MemoryRecord(3, RELEASE, "device", 0x100, 64 * MIB, 30),
        MemoryRecord(77, ALLOCATION, "pinned", 0x900, MIB, 40),  # its call not seen
    ]
    for record in records:
        queue_memory(cupti.library, record)
    cupti.library.fake_kernel(CONCURRENT_KERNEL, 2, 20, 25, 7, 0, 0, 0, b"k")
    recorder.flush_activities(1)  # the buffer's records, after the calls finished so far
    python.add_memory(records)
    calls, rows, dropped = recorder.drain_memory()
    assert calls == [(1, "alloc.py:3"), (3, "free.py:5"), (4, "later.py:1")] and dropped == 0
    native = MemoryCalls(Join())
    native.add_calls(calls)
    native.add_memory(native_memory_records(rows, KINDS))
    assert ledgers(native) == ledgers(python)
    assert native.unattributed == python.unattributed == 1
    joined = NativeJoin(recorder, memcpy_name)
    assert (joined.launch_count, joined.record_count) == (1, 1)  # the kernel alone
    assert python._join.launch_count == 1
    close(recorder)


@st.composite
def memory_programs(draw):
    """A program's calls as CUPTI reports them: allocations from a few lines, frees of what is
    held (or of an address never seen), kernel launches between; each call's memory record in
    the buffer after it (or, now and then, the buffer before its call finished: it then finds
    no line), buffers cut anywhere."""
    lines = [f"app.py:{n}" for n in draw(st.lists(st.integers(1, 9), min_size=1, max_size=4))]
    steps, held, number = [], [], 0
    for _ in range(draw(st.integers(0, 30))):
        number += 1
        what = draw(st.sampled_from(["alloc", "alloc", "free", "kernel"]))
        site = draw(st.sampled_from(lines))
        if what == "kernel":
            steps.append(("call", number, KERNEL_API, site, None))
            continue
        if what == "free" and held and draw(st.booleans()):
            address, size = held.pop(draw(st.integers(0, len(held) - 1)))
        elif what == "free":
            address, size = draw(st.integers(1, 2**40)) * 256, 0  # never seen allocated
        else:
            address = draw(st.integers(1, 64)) * 4096  # an address may come back
            size = draw(st.integers(1, 2**34))
            held.append((address, size))
        operation = ALLOCATION if what == "alloc" else RELEASE
        kind = draw(st.sampled_from(["device", "pinned", "managed"]))
        record = MemoryRecord(number, operation, kind, address, size, number)
        api = MALLOC_API if what == "alloc" else FREE_API
        if draw(st.integers(0, 9)) == 0:  # the record handed over before its call finished
            steps.append(("record", record))
            steps.append(("call", number, api, site, None))
        else:
            steps.append(("call", number, api, site, record))
        if draw(st.integers(0, 3)) == 0:
            steps.append(("buffer",))
    return steps


@given(program=memory_programs())
@settings(
    max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
def test_the_c_path_gives_memory_calls_ledgers_for_any_program_cut_into_any_buffers(cupti, program):
    recorder = memory_recorder(cupti)
    python, native = MemoryCalls(Join()), MemoryCalls(Join())
    waiting: list[MemoryRecord] = []  # records queued in the stand-in, not yet handed over

    def buffer() -> None:
        recorder.flush_activities(1)
        python.add_memory(waiting)  # as the collector: after the calls finished so far
        waiting.clear()
        drained(recorder, native)

    for step in program:
        if step[0] == "buffer":
            buffer()
        elif step[0] == "record":
            queue_memory(cupti.library, step[1])
            waiting.append(step[1])
            buffer()
        else:
            _, number, api, site, record = step
            call(recorder, number, api, site)
            python.add_launch(LaunchRecord(number, 7, site, APIS[api][0]))
            if record is not None:
                queue_memory(cupti.library, record)
                waiting.append(record)
    buffer()
    recorder.join_now()
    drained(recorder, native)
    assert ledgers(native) == ledgers(python)
    assert native.unattributed == python.unattributed
    assert NativeJoin(recorder, memcpy_name).launch_count == python._join.launch_count
    close(recorder)


# --------------------------------------------------------------------------
# A recording made on the GPU, replayed through the C recorder
# --------------------------------------------------------------------------


@pytest.mark.parametrize("path", MEMORY_FIXTURES, ids=lambda path: path.name)
def test_a_recorded_memory_stream_replays_through_the_c_recorder_to_the_live_bytes(cupti, path):
    streams = load_streams(str(path))
    apis = sorted({(launch.api, launch.graph) for launch in streams.launches})
    index = {pair: number for number, pair in enumerate(apis)}
    recorder = memory_recorder(cupti, apis)
    by_call: dict[int, list[LaunchRecord]] = {}
    for launch in streams.launches:
        by_call.setdefault(launch.correlation_id, []).append(launch)
    for number, launches in sorted(by_call.items()):  # the runtime's call, the driver's in it
        recorder.mark(launches[0].site)
        for launch in sorted(launches, key=lambda launch: launch.start):
            recorder.enter(number, index[(launch.api, launch.graph)], launch.start)
        for launch in sorted(launches, key=lambda launch: launch.end):
            recorder.exit(number, launch.end)
        recorder.unmark()
    for record in streams.memory:
        queue_memory(cupti.library, record)
    recorder.flush_activities(1)  # buffers of 1 KiB: the records come in several
    native = MemoryCalls(Join())
    assert drained(recorder, native) == 0
    live = streams.meta["live"]
    for view in (DEVICE, PINNED):
        assert native.ledgers[view].site_dicts() == live[view]
    assert ledgers(native) == ledgers(replay_memory(streams))
    assert native.unattributed == 0
    assert NativeJoin(recorder, memcpy_name).launch_count == 0  # memory calls are no launches
    close(recorder)


# --------------------------------------------------------------------------
# The session: --memory keeps the native path
# --------------------------------------------------------------------------


def test_a_memory_session_reads_the_buffers_in_c_and_names_each_line_its_bytes(cupti, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: cupti.path)
    library = cupti.library
    library.fake_reset_activity()
    session = ProfileSession(memory=True)
    session.pools.start = lambda: None  # no pool library here: their hooks are tested apart
    assert session.start()
    collector = session.collector
    assert collector.activity_reader == "native" and isinstance(session.join, NativeJoin)
    recorder = collector._callbacks.recorder
    library.fake_complete_on_thread(1)
    for number, (domain, cbid, site) in enumerate(
        (
            (RUNTIME_API, CUDA_MALLOC, "alloc.py:3"),
            (DRIVER, CUDA_LAUNCH_KERNEL, "step.py:9"),
            (RUNTIME_API, CUDA_MALLOC, "alloc.py:4"),
            (RUNTIME_API, CUDA_FREE, "free.py:5"),
        ),
        1,
    ):
        recorder.mark(site)
        assert library.fake_callback(domain, cbid, 0, number) == 1
        assert library.fake_callback(domain, cbid, 1, number) == 1
        recorder.unmark()
        if number == 2:
            library.fake_kernel(CONCURRENT_KERNEL, 2, 20, 25, 7, 0, 0, 0, b"k")
            library.fake_complete()  # on CUPTI's thread, as a buffer fills
    for record in (
        MemoryRecord(1, ALLOCATION, "device", 0x100, 64 * MIB, 10),
        MemoryRecord(3, ALLOCATION, "device", 0x200, 16 * MIB, 30),
        MemoryRecord(4, RELEASE, "device", 0x100, 64 * MIB, 40),
    ):
        queue_memory(library, record)
    session.stop()
    device = session.ledgers()[DEVICE]
    assert device.site_dicts()["alloc.py:3"]["freed"] == 64 * MIB
    assert device.site_dicts()["alloc.py:3"]["at_peak"] == 64 * MIB
    assert device.site_dicts()["alloc.py:4"]["allocated"] == 16 * MIB
    assert device.peak == 80 * MIB and "free.py:5" not in device.sites
    assert (session.join.launch_count, session.join.record_count) == (1, 1)
    sites = {site["name"]: site for site in session.sites}
    assert sites["step.py:9"]["launches"] == 1 and "memory" not in sites["step.py:9"]
    assert sites["alloc.py:3"]["launches"] == 0  # a line that allocated and launched nothing
    assert sites["alloc.py:3"]["memory"]["device"]["allocated"] == 64 * MIB
