"""The recorded streams as a Chrome trace-event file, which Perfetto and chrome://tracing open.

Kernels, copies and sets sit on one track per GPU stream (a process per device, a thread per
stream), named `call site / kernel`; launch API calls sit on one track per CPU thread of the
program; a flow arrow joins each launch to the GPU work it caused. The work of a CUDA graph
replay is named after the line that made its node (the launch captured), and its args carry the
line that replayed it (`replayed_at`), the graph and the node. Events are complete events
(`"ph": "X"`) in microseconds from the first timestamp; `"M"` events name the tracks.
"""

from __future__ import annotations

import json
from typing import Any

from kname._version import __version__
from kname.documents.kernel_names import display_name
from kname.documents.text import os_text
from kname.profiling.join import Attribution, replay_join
from kname.profiling.records import ActivityRecord, LaunchRecord, Streams

GPU_PID_BASE = 1 << 30  # GPU device d is trace process GPU_PID_BASE + d
NAME_SEPARATOR = " / "


def trace_events(streams: Streams) -> list[dict[str, Any]]:
    """Every timed launch and GPU record of `streams` as trace events, track names first."""
    join = replay_join(streams)
    timed_launches = [r for r in streams.launches if r.start]
    timed_work = [r for r in streams.activities if r.start]
    starts = [r.start for r in timed_launches] + [r.start for r in timed_work]
    origin = min(starts, default=0)
    cpu_pid = int(streams.meta.get("pid", 1))
    threads: dict[int, int] = {}  # thread ident -> track number, in first-seen order
    for launch in sorted(timed_launches, key=lambda r: r.start):
        threads.setdefault(launch.thread, len(threads) + 1)
    events = _track_names(cpu_pid, threads, timed_work, streams.meta)
    launches_by_id = {r.correlation_id: r for r in timed_launches}
    for launch in timed_launches:
        events.append(_launch_event(launch, cpu_pid, threads[launch.thread], origin))
    for number, record in enumerate(timed_work, 1):
        events.append(_work_event(record, join.attribution(record), origin))
        launch = launches_by_id.get(record.correlation_id)
        if launch is not None:
            events += _flow(number, launch, cpu_pid, threads[launch.thread], record, origin)
    return events


def trace_json(streams: Streams) -> str:
    """The whole trace file: `traceEvents` plus what wrote it."""
    document = {
        "traceEvents": trace_events(streams),
        "displayTimeUnit": "ns",
        "otherData": {"kname": __version__, "clock": "CUPTI timestamps, ns"},
    }
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"


def _track_names(
    cpu_pid: int, threads: dict[int, int], work: list[ActivityRecord], meta: dict[str, Any]
) -> list[dict[str, Any]]:
    program = os_text(str(meta.get("program") or "program"))  # a command line: any bytes
    events = [
        _meta("process_name", cpu_pid, 0, {"name": f"CPU: {program} (pid {cpu_pid})"}),
        _meta("process_sort_index", cpu_pid, 0, {"sort_index": 0}),
    ]
    for ident, track in threads.items():
        events.append(_meta("thread_name", cpu_pid, track, {"name": f"thread {track} ({ident})"}))
    devices = sorted({r.device for r in work})
    for device in devices:
        pid = GPU_PID_BASE + device
        events.append(_meta("process_name", pid, 0, {"name": f"GPU {device}"}))
        events.append(_meta("process_sort_index", pid, 0, {"sort_index": 1 + device}))
    for device, stream in sorted({(r.device, r.stream) for r in work}):
        events.append(
            _meta("thread_name", GPU_PID_BASE + device, stream, {"name": f"stream {stream}"})
        )
    return events


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}


def _launch_event(launch: LaunchRecord, pid: int, tid: int, origin: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "launch",
        "name": launch.api or "launch",
        "pid": pid,
        "tid": tid,
        "ts": _us(launch.start - origin),
        "dur": _us(max(launch.end - launch.start, 0)),
        "args": {"site": launch.site, "correlation_id": launch.correlation_id},
    }


def _work_event(record: ActivityRecord, where: Attribution, origin: int) -> dict[str, Any]:
    args: dict[str, Any] = {
        "site": where.site,
        "kernel": record.name,
        "correlation_id": record.correlation_id,
    }
    if where.replayed_at:
        args["replayed_at"] = where.replayed_at
        if not where.capture_seen:
            args["capture_seen"] = False
    if record.graph_id:
        args["graph_id"] = record.graph_id
    if record.graph_node_id:
        args["graph_node_id"] = record.graph_node_id
    return {
        "ph": "X",
        "cat": record.kind,
        "name": f"{where.site}{NAME_SEPARATOR}{display_name(record.name)}",
        "pid": GPU_PID_BASE + record.device,
        "tid": record.stream,
        "ts": _us(record.start - origin),
        "dur": _us(record.duration),
        "args": args,
    }


def _flow(
    number: int, launch: LaunchRecord, pid: int, tid: int, record: ActivityRecord, origin: int
) -> list[dict[str, Any]]:
    # One arrow per GPU record: a graph launch starts as many arrows as it has kernels.
    common = {"cat": "launch", "name": "launch", "id": number}
    return [
        {**common, "ph": "s", "pid": pid, "tid": tid, "ts": _us(launch.start - origin)},
        {
            **common,
            "ph": "f",
            "bp": "e",
            "pid": GPU_PID_BASE + record.device,
            "tid": record.stream,
            "ts": _us(record.start - origin),
        },
    ]


def _us(ns: int) -> float:
    return round(ns / 1000, 3)
