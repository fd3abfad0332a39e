"""The streams a profile is made of, and their JSON form (recorded on a GPU, replayed in CI).

A launch record is written at a launch API call: its correlation id, the thread, the call site.
A graph node record is written when CUPTI reports a CUDA graph node created (during stream
capture, inside a launch call; or added explicitly), cloned (at instantiation), updated
(cudaGraphExecUpdate) or destroyed: it ties the node to the line that made it. An activity record
comes later from CUPTI: what ran on the GPU (a kernel, a copy, a set), when, where, the
correlation id of the API call that caused it and, for graph work, the node it ran as.
Timestamps are CUPTI's, in ns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kname._locks import new_lock
from kname.config import DEFAULT_TRACE_MAX

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"
ACTIVITY_KINDS = (KERNEL, MEMCPY, MEMSET)
# 2 added graph node records and activity records' graph_node_id; 3: a launch call's start is
# stamped once kname's own work for it is done (before, its CPU time counted kname's look-up,
# so a replay of format 1 or 2 gives no launch times: Streams.timed_calls).
STREAMS_FORMAT = 3
UNTIMED_FORMAT = 2  # what streams read from a format below 3 are written as again
READ_FORMATS = (1, 2, 3)
MAX_LOGGED = DEFAULT_TRACE_MAX  # records a StreamLog keeps (for --trace and fixtures), all kinds


@dataclass(slots=True)
class LaunchRecord:
    """One launch API call (a kernel, graph, copy or set launch), named by its call site."""

    correlation_id: int
    thread: int  # threading.get_ident() of the launching thread
    site: str  # the call-site name
    api: str = ""  # e.g. "cuLaunchKernel"
    start: int = 0  # API enter and exit (CPU side), ns; 0 when unknown
    end: int = 0
    graph: bool = False  # a graph launch: every kernel of the graph carries its correlation id
    parent: int = 0  # correlation id of the launch API call it ran inside (runtime -> driver)


@dataclass(slots=True)
class ActivityRecord:
    """One piece of GPU work: a kernel, a memcpy or a memset, with its device times."""

    kind: str  # KERNEL, MEMCPY or MEMSET
    correlation_id: int
    name: str  # the kernel's name as CUPTI gives it, or "[memcpy HtoD]", "[memset]"
    start: int
    end: int
    stream: int = 0
    device: int = 0
    graph_id: int = 0  # nonzero for work launched as part of a CUDA graph
    graph_node_id: int = 0  # the graph node it ran as (CUPTI's graphNodeId), 0 if none

    @property
    def duration(self) -> int:
        """Device time in ns (0 when CUPTI could not time it)."""
        return self.end - self.start if self.end > self.start else 0


# What happened to a graph node (CUPTI's resource callbacks), in GraphNodeRecord.event.
NODE_CREATED = "created"  # GRAPHNODE_CREATED: `site` made `node` in `graph`
NODE_CLONED = "cloned"  # GRAPHNODE_CLONED: `node` is a copy of `original` (instantiation, clones)
# GRAPH_NODE_UPDATED (cudaGraphExecUpdate): `original`, a node of executable graph `graph_exec`,
# takes the parameters of `node`, of the graph given to the update (as CUPTI 13.0 gave them on
# the H200: tests/data/graphs_h200.json).
NODE_UPDATED = "updated"
NODE_DESTROYED = "destroyed"  # GRAPHNODE_DESTROY_STARTING
GRAPH_DESTROYED = "graph_destroyed"  # GRAPH_DESTROY_STARTING: every node of `graph`
EXEC_DESTROYED = "exec_destroyed"  # GRAPHEXEC_DESTROY_STARTING: every node of `graph_exec`
NODE_EVENTS = (
    NODE_CREATED, NODE_CLONED, NODE_UPDATED, NODE_DESTROYED, GRAPH_DESTROYED, EXEC_DESTROYED,
)  # fmt: skip


@dataclass(slots=True)
class GraphNodeRecord:
    """One of CUPTI's graph resource callbacks, as the join needs it (ids are CUPTI's)."""

    event: str  # one of NODE_EVENTS
    node: int = 0  # cuptiGetGraphNodeId
    graph: int = 0  # cuptiGetGraphId of the graph the node is in (or the graph destroyed)
    graph_exec: int = 0  # cuptiGetGraphExecId of the executable graph it is in, 0 if none
    original: int = 0  # cloned: the node it copies; updated: the executable graph's node
    site: str = ""  # created: the line that made it (the launch call captured, or the caller)
    correlation_id: int = 0  # the last launch API call entered before it (orders it among them)


@dataclass(slots=True)
class ExternalCorrelation:
    """CUPTI's link from an API call to an id kname pushed around a launch it wrapped."""

    correlation_id: int
    external_id: int


# What a memory record did (CUPTI's CUpti_ActivityMemoryOperationType), in MemoryRecord.operation.
ALLOCATION, RELEASE = "allocation", "release"


@dataclass(slots=True)
class MemoryRecord:
    """One of CUPTI's memory records (MEMORY2): memory the driver gave or took back, and the
    correlation id of the API call that did it (memory_join.py ties it to that call's line)."""

    correlation_id: int
    operation: str  # ALLOCATION or RELEASE
    memory_kind: str  # CUPTI's CUpti_ActivityMemoryKind, lower case: "device", "pinned", ...
    address: int
    bytes: int
    timestamp: int  # CUPTI's, ns
    device: int = 0
    stream: int = 0
    is_async: bool = False  # cudaMallocAsync / cudaFreeAsync (a memory pool's)


@dataclass
class Streams:
    """Everything recorded in one process: what the join needs, and facts about the run."""

    launches: list[LaunchRecord] = field(default_factory=list)
    activities: list[ActivityRecord] = field(default_factory=list)
    externals: list[ExternalCorrelation] = field(default_factory=list)
    external_sites: dict[int, str] = field(default_factory=dict)  # external id -> site name
    meta: dict[str, Any] = field(default_factory=dict)
    graph_nodes: list[GraphNodeRecord] = field(default_factory=list)  # in the order they came
    memory: list[MemoryRecord] = field(default_factory=list)  # kname profile --memory only
    timed_calls: bool = True  # launch calls' times are the launch's own (format 3 on)


class StreamsError(ValueError):
    """A recorded stream file cannot be read: the message is one line, naming the file."""


class StreamLog:
    """A bounded copy of both streams, kept for --trace and for recording fixtures."""

    def __init__(self, max_records: int = MAX_LOGGED) -> None:
        self.max_records = max_records
        self.launches: list[LaunchRecord] = []
        self.activities: list[ActivityRecord] = []
        self.externals: list[ExternalCorrelation] = []
        self.graph_nodes: list[GraphNodeRecord] = []
        self.memory: list[MemoryRecord] = []
        self.dropped = 0  # records not kept once the bound was reached
        self._lock = new_lock()  # freed in a forked child, whoever held it

    def launch(self, record: LaunchRecord) -> None:
        """Keep a launch record (the same object: its exit time is filled in later)."""
        if self.kept < self.max_records:
            self.launches.append(record)  # list.append is atomic: no lock on the launch path
        else:
            self.dropped += 1

    def graph_node(self, record: GraphNodeRecord) -> None:
        """Keep a graph node record (in the order CUPTI's callbacks came)."""
        if self.kept < self.max_records:
            self.graph_nodes.append(record)
        else:
            self.dropped += 1

    def add_activities(self, records: list[ActivityRecord]) -> None:
        """Keep activity records, up to the bound."""
        self._add(self.activities, records)

    def add_externals(self, records: list[ExternalCorrelation]) -> None:
        """Keep external correlation records (one per API call inside a wrapped launch)."""
        self._add(self.externals, records)

    def add_memory(self, records: list[MemoryRecord]) -> None:
        """Keep memory records, up to the bound."""
        self._add(self.memory, records)

    def streams(self, external_sites: Mapping[int, str] | None = None, **meta: Any) -> Streams:
        """A snapshot of what was kept, with `meta` describing the run."""
        with self._lock:
            return Streams(
                list(self.launches),
                list(self.activities),
                list(self.externals),
                dict(external_sites or {}),
                dict(meta, dropped_records=self.dropped),
                list(self.graph_nodes),
                list(self.memory),
            )

    @property
    def kept(self) -> int:
        """Records kept, of every kind."""
        return (
            len(self.launches) + len(self.activities) + len(self.externals) + len(self.graph_nodes)
            + len(self.memory)
        )  # fmt: skip

    def _add(self, kept: list, records: list) -> None:
        with self._lock:
            room = max(self.max_records - self.kept, 0)
            kept.extend(records[:room])
            self.dropped += max(len(records) - room, 0)


def streams_to_json(streams: Streams) -> str:
    """The streams as JSON text, one record per line (readable diffs of fixtures)."""

    def lines(records: list) -> str:
        body = ",\n".join(f"    {json.dumps(asdict(r), ensure_ascii=False)}" for r in records)
        return f"[\n{body}\n  ]" if records else "[]"

    sites = {str(k): v for k, v in sorted(streams.external_sites.items())}
    return (
        "{\n"
        f'  "kname_streams": {STREAMS_FORMAT if streams.timed_calls else UNTIMED_FORMAT},\n'
        f'  "meta": {json.dumps(streams.meta, ensure_ascii=False, sort_keys=True)},\n'
        f'  "launches": {lines(streams.launches)},\n'
        f'  "activities": {lines(streams.activities)},\n'
        f'  "external_correlations": {lines(streams.externals)},\n'
        f'  "external_sites": {json.dumps(sites, ensure_ascii=False)},\n'
        f'  "graph_nodes": {lines(streams.graph_nodes)}{_memory_json(streams, lines)}\n'
        "}\n"
    )


def _memory_json(streams: Streams, lines: Callable[[list], str]) -> str:
    """The memory records' key, only where there are some (streams recorded before have none)."""
    return f',\n  "memory": {lines(streams.memory)}' if streams.memory else ""


def streams_from_json(text: str, source: str) -> Streams:
    """Parse streams written by streams_to_json; StreamsError (one line) on any fault."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StreamsError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("kname_streams") not in READ_FORMATS:
        read = ", ".join(map(str, READ_FORMATS[:-1])) + f" or {READ_FORMATS[-1]}"
        raise StreamsError(f"{source}: not kname streams of format {read}")
    try:
        launches = [_launch(item) for item in data["launches"]]
        activities = [_activity(item) for item in data["activities"]]
        externals = [ExternalCorrelation(**item) for item in data.get("external_correlations", [])]
        sites = {int(k): str(v) for k, v in data.get("external_sites", {}).items()}
        meta = dict(data.get("meta", {}))
        nodes = [_graph_node(item) for item in data.get("graph_nodes", [])]
        memory = [_memory(item) for item in data.get("memory", [])]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StreamsError(f"{source}: malformed record ({type(exc).__name__}: {exc})") from None
    timed = data["kname_streams"] >= 3
    return Streams(launches, activities, externals, sites, meta, nodes, memory, timed_calls=timed)


def load_streams(path: str) -> Streams:
    """Read a recorded stream file."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise StreamsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return streams_from_json(text, path)


def _launch(item: dict) -> LaunchRecord:
    record = LaunchRecord(**item)
    if not isinstance(record.site, str) or not isinstance(record.correlation_id, int):
        raise ValueError(f"bad launch record {item!r}")
    return record


def _activity(item: dict) -> ActivityRecord:
    record = ActivityRecord(**item)
    if record.kind not in ACTIVITY_KINDS or not isinstance(record.name, str):
        raise ValueError(f"bad activity record {item!r}")
    return record


def _graph_node(item: dict) -> GraphNodeRecord:
    record = GraphNodeRecord(**item)
    if record.event not in NODE_EVENTS or not isinstance(record.site, str):
        raise ValueError(f"bad graph node record {item!r}")
    return record


def _memory(item: dict) -> MemoryRecord:
    record = MemoryRecord(**item)
    if record.operation not in (ALLOCATION, RELEASE) or not isinstance(record.bytes, int):
        raise ValueError(f"bad memory record {item!r}")
    if not isinstance(record.address, int) or not isinstance(record.memory_kind, str):
        raise ValueError(f"bad memory record {item!r}")
    return record
