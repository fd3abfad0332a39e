"""The Chrome trace-event file: parsed back and checked against the streams it was made from.

What Perfetto and chrome://tracing need: a `traceEvents` list; complete events (`"ph": "X"`)
with pid, tid, ts and dur in microseconds; metadata events (`"ph": "M"`) naming every process
and thread used; flow events (`s`, then `f` with `"bp": "e"`) sharing an id.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from support.profile_streams import streams

from kname.profiling.join import UNATTRIBUTED
from kname.profiling.records import (
    NODE_CLONED,
    NODE_CREATED,
    ActivityRecord,
    GraphNodeRecord,
    LaunchRecord,
    Streams,
)
from kname.profiling.trace import GPU_PID_BASE, trace_json


def parsed(stream: Streams) -> list[dict]:
    document = json.loads(trace_json(stream))
    assert set(document) == {"traceEvents", "displayTimeUnit", "otherData"}
    return document["traceEvents"]


def test_kernels_sit_on_stream_tracks_and_launches_on_thread_tracks():
    launches = [
        LaunchRecord(1, 111, "step app.py:12", "cuLaunchKernel", 10_000, 14_000),
        LaunchRecord(2, 222, "main app.py:30", "cudaMemcpyAsync", 20_000, 21_500),
    ]
    work = [
        ActivityRecord("kernel", 1, "_Z9scale_rawPfi", 15_000, 17_500, 7, 0),
        ActivityRecord("memcpy", 2, "[memcpy HtoD]", 22_000, 22_250, 13, 1),
    ]
    events = parsed(Streams(launches, work, meta={"pid": 4242, "program": "python app.py"}))
    complete = [e for e in events if e["ph"] == "X"]
    kernel = next(e for e in complete if e["cat"] == "kernel")
    assert kernel["name"] == "step app.py:12 / scale_raw"
    assert (kernel["pid"], kernel["tid"], kernel["ts"], kernel["dur"]) == (
        GPU_PID_BASE,
        7,
        5.0,
        2.5,
    )
    assert kernel["args"] == {
        "site": "step app.py:12",
        "kernel": "_Z9scale_rawPfi",
        "correlation_id": 1,
    }
    copy = next(e for e in complete if e["cat"] == "memcpy")
    assert copy["name"] == "main app.py:30 / [memcpy HtoD]" and copy["pid"] == GPU_PID_BASE + 1
    calls = [e for e in complete if e["cat"] == "launch"]
    assert [(e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in calls] == [
        ("cuLaunchKernel", 4242, 1, 0.0, 4.0),
        ("cudaMemcpyAsync", 4242, 2, 10.0, 1.5),
    ]
    names = {(e["pid"], e["tid"], e["name"]): e["args"] for e in events if e["ph"] == "M"}
    assert names[(4242, 0, "process_name")] == {"name": "CPU: python app.py (pid 4242)"}
    assert names[(4242, 1, "thread_name")] == {"name": "thread 1 (111)"}
    assert names[(GPU_PID_BASE + 1, 0, "process_name")] == {"name": "GPU 1"}
    assert names[(GPU_PID_BASE, 7, "thread_name")] == {"name": "stream 7"}


def test_every_kernel_of_a_graph_gets_an_arrow_from_the_graph_launch():
    launches = [LaunchRecord(5, 1, "replay app.py:9", "cudaGraphLaunch", 1_000, 2_000, True)]
    work = [
        ActivityRecord("kernel", 5, k, 3_000 + i, 3_500 + i, 7, 0, 2) for i, k in enumerate("ab")
    ]
    events = parsed(Streams(launches, work))
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(ends) == 2
    assert {e["id"] for e in starts} == {e["id"] for e in ends}
    assert all(e["bp"] == "e" and e["pid"] == GPU_PID_BASE for e in ends)
    assert all(e["ts"] == 0.0 for e in starts)
    graph = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert [e["args"]["graph_id"] for e in graph] == [2, 2]


def test_a_replayed_kernel_is_named_by_its_capture_line_and_carries_its_replay_line():
    launches = [
        LaunchRecord(1, 1, "forward model.py:21", "cudaLaunchKernel", 500, 600),  # captured
        LaunchRecord(5, 1, "step runner.py:26", "cudaGraphLaunch", 1_000, 2_000, True),
    ]
    nodes = [
        GraphNodeRecord(NODE_CREATED, 40, 1, 0, 0, "forward model.py:21", 1),
        GraphNodeRecord(NODE_CLONED, 41, 1, 3, 40, "", 1),
    ]
    work = [
        ActivityRecord("kernel", 5, "gemm", 3_000, 3_500, 7, 0, 3, 41),
        ActivityRecord("kernel", 5, "add", 3_600, 3_700, 7, 0, 3, 99),  # made before profiling
    ]
    events = parsed(Streams(launches, work, graph_nodes=nodes))
    gemm, add = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert gemm["name"] == "forward model.py:21 / gemm"
    assert gemm["args"] == {
        "site": "forward model.py:21", "kernel": "gemm", "correlation_id": 5,
        "replayed_at": "step runner.py:26", "graph_id": 3, "graph_node_id": 41,
    }  # fmt: skip
    assert add["name"] == "step runner.py:26 / add"
    assert add["args"]["replayed_at"] == "step runner.py:26"
    assert add["args"]["capture_seen"] is False


@given(streams())
def test_every_timed_record_is_one_event_on_a_named_track(stream):
    events = parsed(stream)
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    complete = [e for e in events if e["ph"] == "X"]
    for event in complete:
        assert (event["pid"], event["tid"]) in named and event["pid"] in processes
        assert event["ts"] >= 0 and event["dur"] >= 0
    site_of = {r.correlation_id: r.site for r in stream.launches}
    work = [e for e in complete if e["cat"] != "launch"]
    for event in work:
        assert event["name"].startswith(event["args"]["site"] + " / ")
    timed = [r for r in stream.activities if r.start]
    assert sorted(
        (e["args"]["correlation_id"], e["args"]["site"], e["dur"]) for e in work
    ) == sorted(
        (r.correlation_id, site_of.get(r.correlation_id, UNATTRIBUTED), round(r.duration / 1000, 3))
        for r in timed
    )
    flows = [e for e in events if e["ph"] in "sf"]
    assert len(flows) % 2 == 0
    assert sorted(e["id"] for e in flows if e["ph"] == "s") == sorted(
        e["id"] for e in flows if e["ph"] == "f"
    )


@pytest.mark.parametrize("empty", [Streams(), Streams(launches=[LaunchRecord(1, 1, "s")])])
def test_nothing_timed_is_a_valid_empty_trace(empty):
    events = parsed(empty)
    assert [e for e in events if e["ph"] != "M"] == []


def test_a_command_line_of_undecodable_bytes_names_the_cpu_track_with_its_escapes():
    """sys.argv keeps bytes that are not UTF-8 as lone surrogates (os.fsdecode): the trace is
    still written, those bytes shown as escapes."""
    program = " ".join(["python", "app.py", os.fsdecode(b"--out=r\xe9sultats")])
    launch = LaunchRecord(1, 111, "step app.py:12", "cuLaunchKernel", 10_000, 14_000)
    text = trace_json(Streams([launch], [], meta={"pid": 7, "program": program}))
    text.encode("utf-8")  # what write_atomically does
    (track,) = [e for e in json.loads(text)["traceEvents"] if e["name"] == "process_name"]
    assert track["args"]["name"] == "CPU: python app.py --out=r\\xe9sultats (pid 7)"
