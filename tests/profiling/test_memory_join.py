"""The driver's view of memory per line: memory API calls kept apart from launches, CUPTI's
memory records joined to them, recorded streams carrying them, and a session with memory on.

CUPTI's records and callbacks need a GPU: the session here runs a scripted stand-in of the
collector (as test_profiling_session.py does), which makes the calls the collector would make;
cupti-python's ActivityMemory4 objects are stood in for by plain objects with its attributes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kname import callsite
from kname.config import DEFAULT_FORMAT
from kname.documents.schema import render_json, validate
from kname.profiling.join import UNATTRIBUTED, Join
from kname.profiling.memory_join import (
    DEVICE,
    PINNED,
    MemoryCalls,
    MemoryKinds,
    memory_api,
    memory_records,
    replay_memory,
    select_memory_apis,
)
from kname.profiling.records import (
    ALLOCATION,
    RELEASE,
    LaunchRecord,
    MemoryRecord,
    Streams,
    StreamsError,
    load_streams,
    streams_from_json,
    streams_to_json,
)
from kname.profiling.session import ProfileSession

MIB = 1 << 20


def test_the_memory_apis_are_chosen_by_name_and_shown_without_the_runtime_version():
    ids = {
        "cuMemAlloc_v2": 1, "cuMemFree_v2": 2, "cuMemAllocAsync": 3, "cuMemHostAlloc": 4,
        "cudaMalloc_v3020": 5, "cudaMallocManaged_v6000": 6, "cudaFreeAsync_v11020": 7,
        "cuLaunchKernel": 8, "cuMemcpyHtoD_v2": 9, "cuMemHostGetDevicePointer": 10,
    }  # fmt: skip
    chosen = select_memory_apis(ids)
    assert sorted(chosen) == [1, 2, 3, 4, 5, 6, 7]
    assert chosen[5] == ("cudaMalloc", False) and chosen[7] == ("cudaFreeAsync", False)
    assert not memory_api("cuLaunchKernel") and not memory_api("cuMemcpyAsync")


def test_memory_calls_stay_apart_from_the_launch_join_and_the_rest_goes_on_to_it():
    join = Join()
    calls = MemoryCalls(join)
    calls.add_launch(LaunchRecord(1, 7, "alloc app.py:3", "cudaMalloc"))
    calls.add_launch(LaunchRecord(2, 7, "alloc app.py:3", "cuMemAlloc_v2", parent=1))
    calls.add_launch(LaunchRecord(3, 7, "step app.py:9", "cuLaunchKernel"))
    assert join.launch_count == 1  # the kernel launch alone: memory calls are no launches
    calls.add_memory([MemoryRecord(2, ALLOCATION, "device", 0x100, 8 * MIB, 10)])
    assert calls.ledgers[DEVICE].site_dicts()["alloc app.py:3"]["allocated"] == 8 * MIB


def test_a_free_is_charged_to_the_line_that_allocated_and_views_follow_the_memory_kind():
    calls = MemoryCalls(Join())
    for correlation, site, api in (
        (1, "alloc app.py:3", "cudaMalloc"),
        (2, "pin app.py:4", "cudaHostAlloc"),
        (3, "free app.py:9", "cudaFree"),
    ):
        calls.add_launch(LaunchRecord(correlation, 7, site, api))
    calls.add_memory(
        [
            MemoryRecord(1, ALLOCATION, "device", 0x100, 8 * MIB, 10),
            MemoryRecord(2, ALLOCATION, "pinned", 0x900, 2 * MIB, 11),
            MemoryRecord(3, RELEASE, "device", 0x100, 8 * MIB, 12),
            MemoryRecord(99, ALLOCATION, "managed", 0x500, MIB, 13),  # its call never seen
        ]
    )
    device = calls.ledgers[DEVICE].site_dicts()
    assert device["alloc app.py:3"] | {} == {
        "allocated": 8 * MIB, "allocations": 1, "freed": 8 * MIB, "frees": 1, "peak": 8 * MIB,
        "at_peak": 8 * MIB,
    }  # fmt: skip
    assert "free app.py:9" not in device
    assert device[UNATTRIBUTED]["allocated"] == MIB and calls.unattributed == 1
    assert calls.ledgers[PINNED].site_dicts()["pin app.py:4"]["allocated"] == 2 * MIB


def test_cuptis_memory_records_are_copied_out_and_other_kinds_passed_over():
    kinds = MemoryKinds(49, 1, {3: "device", 2: "pinned"})
    record = SimpleNamespace(
        kind=49, memory_operation_type=2, memory_kind=3, correlation_id=5, address=0x7F00,
        bytes=4096, timestamp=123, device_id=0, stream_id=7, is_async=1,
    )  # fmt: skip
    kernel = SimpleNamespace(kind=10)
    (copied,) = memory_records([kernel, record], kinds)
    assert copied == MemoryRecord(5, RELEASE, "device", 0x7F00, 4096, 123, 0, 7, True)


def test_streams_keep_their_memory_records_and_streams_without_any_read_as_before():
    streams = Streams(
        launches=[LaunchRecord(1, 7, "alloc app.py:3", "cudaMalloc")],
        memory=[MemoryRecord(1, ALLOCATION, "device", 0x100, MIB, 10)],
    )
    text = streams_to_json(streams)
    assert streams_from_json(text, "s.json") == streams
    without = streams_to_json(Streams())
    assert '"memory"' not in without and streams_from_json(without, "s.json").memory == []
    assert replay_memory(streams).ledgers[DEVICE].peak == MIB


@pytest.mark.parametrize(
    "record",
    [
        {"correlation_id": 1, "operation": "grow", "memory_kind": "device", "address": 1,
         "bytes": 1, "timestamp": 0},
        {"correlation_id": 1, "operation": "allocation", "memory_kind": "device",
         "address": "0x1", "bytes": 1, "timestamp": 0},
        {"correlation_id": 1, "operation": "allocation"},
    ],
)  # fmt: skip
def test_a_bad_memory_record_is_one_line(record):
    text = json.dumps({"kname_streams": 2, "launches": [], "activities": [], "memory": [record]})
    with pytest.raises(StreamsError, match=r"s\.json: malformed record"):
        streams_from_json(text, "s.json")


class ScriptedMemoryCupti:
    """Stands in for CuptiCollector(memory=...): the memory calls and records CUPTI gives."""

    def __init__(self, capture, join, log, memory):
        self.capture, self.join, self.log, self.memory = capture, join, log, memory
        self.started = False
        self.next_id = 0

    def start(self):
        self.started = True
        return True

    def stop(self):
        self.started = False

    def call(self, api, operation, address, size):
        """A memory API call from the caller's line, and the memory record it causes."""
        self.next_id += 1
        self.capture.enter(sys._getframe(1), self.next_id, api, False, 0)
        self.capture.exit(self.next_id, 0)
        record = MemoryRecord(self.next_id, operation, "device", address, size, self.next_id)
        self.memory.add_memory([record])
        self.log.add_memory([record])


@pytest.fixture
def session():
    callsite.configure((), DEFAULT_FORMAT, 1, False)
    made = ProfileSession(keep_streams=True, collector=ScriptedMemoryCupti, memory=True)
    made.pools.start = lambda: None  # no pool library here: their hooks are tested apart
    yield made
    made.stop()
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.clear()


def test_a_session_with_memory_names_each_line_its_bytes_and_peak(session):
    with session as profile:
        cupti = profile.collector
        line = sys._getframe().f_lineno
        cupti.call("cudaMalloc", ALLOCATION, 0x100, 64 * MIB)
        cupti.call("cudaMalloc", ALLOCATION, 0x200, 16 * MIB)
        cupti.call("cudaFree", RELEASE, 0x100, 64 * MIB)
    document = validate(json.loads(render_json(session.document())), "p.json")
    sites = {site["name"].rsplit(":", 1)[1]: site for site in document["sites"]}
    assert sites[str(line + 1)]["memory"]["device"]["at_peak"] == 64 * MIB
    assert sites[str(line + 2)]["memory"]["device"]["freed"] == 0
    assert str(line + 3) not in sites  # the free is charged to the line that allocated
    assert document["memory"]["device"]["peak"] == 80 * MIB
    assert session.join.launch_count == 0
    table = session.table()
    assert "allocated  peak held" in table and "64.0 MiB" in table
    assert "memory peak (device): 80.0 MiB, most held by " in table
    replayed = replay_memory(session.streams())
    assert replayed.ledgers[DEVICE].site_dicts() == session.ledgers()[DEVICE].site_dicts()


DATA = Path(__file__).parent.parent / "data"
# Streams recorded on a GPU (memory_profile_*.json are the profiles the README's sample reads).
MEMORY_FIXTURES = [p for p in sorted(DATA.glob("memory_*.json")) if "_profile_" not in p.name]


def test_a_memory_fixture_recorded_on_a_gpu_is_here():
    assert MEMORY_FIXTURES  # tests/gpu/memory_record.py --session writes memory_streams.json


@pytest.mark.parametrize("path", MEMORY_FIXTURES, ids=lambda path: path.name)
def test_recorded_memory_records_replay_to_the_lines_and_bytes_of_the_live_run(path):
    streams = load_streams(str(path))
    replayed = replay_memory(streams)
    live = streams.meta["live"]
    for view in (DEVICE, PINNED):
        assert replayed.ledgers[view].site_dicts() == live[view]
    assert replayed.unattributed == 0
    sites = {
        (view, int(name.rsplit(":", 1)[1])): numbers
        for view in (DEVICE, PINNED)
        for name, numbers in live[view].items()
        if "memory_demo.py:" in name
    }
    # The lines that call cuda-bindings themselves. (The recorder ran without install(): numba's,
    # CuPy's and torch's frames were not known as library code, so their calls are named after
    # the library's own line there; `kname profile` names them after the demo's.)
    raw = {tag: mark for tag, mark in streams.meta["demo"].items() if tag.startswith("raw_")}
    assert len(raw) == 4
    for tag, mark in raw.items():
        numbers = sites[(PINNED if tag == "raw_pinned" else DEVICE, mark["alloc"])]
        assert numbers["allocated"] == mark["bytes"] == numbers["freed"], tag
