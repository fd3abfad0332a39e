"""The driver's view of memory per line: CUPTI's memory records joined to the calling line.

With `kname profile --memory` the launch callback also sees the driver's and runtime's memory
calls (cuMemAlloc*, cuMemFree*, cuMemHostAlloc, cuMemCreate/Release, cudaMalloc*, cudaFree*,
cudaHostAlloc: memory_apis), named by the same rules as a launch. Their records come to the
capture as launch records do; MemoryCalls keeps them apart from the launch join (their site by
correlation id, in a bounded window) and hands every other record on. CUPTI's memory records
(MEMORY2: allocation or release, bytes, address, kind) then find the line by that correlation
id, exactly as a kernel finds its launch, and go to the ledger of their view (memory.py):
`device` (device, managed and array memory) or `pinned` (host memory the driver pins). A release
is charged to the line that made the allocation, wherever it was freed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from kname._locks import new_lock
from kname.profiling.join import UNATTRIBUTED
from kname.profiling.memory import Ledger
from kname.profiling.records import ALLOCATION, RELEASE, MemoryRecord, Streams

DEVICE, PINNED = "device", "pinned"  # the driver's views
HOST_KINDS = frozenset({"pinned", "pageable"})  # CUPTI's memory kinds of host memory
MEMORY_APIS = (
    "cuMemAlloc",
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemCreate",
    "cuMemRelease",
    "cudaMalloc",
    "cudaFree",
    "cudaHostAlloc",
)  # fmt: skip  (prefixes: cuMemAllocAsync, cuMemFreeHost, cudaMallocManaged... too)
RECENT_CALLS = 65_536  # memory calls whose site is kept for their records to find
MEMORY_KINDS = ("MEMORY2",)  # CUPTI's activity kinds --memory enables (CUpti_ActivityMemory4)


class MemoryKinds(NamedTuple):
    """CUPTI's numbers the conversion of memory records reads (from the binding's enums)."""

    activity: int  # ActivityKind.MEMORY2
    allocation: int  # ActivityMemoryOperationType.ALLOCATION
    kind_names: Mapping[int, str]  # ActivityMemoryKind number -> name in lower case


def memory_kinds(cupti: Any) -> MemoryKinds:
    """The numbers of cupti-python's `cupti` module."""
    names = {int(v): k.lower() for k, v in cupti.ActivityMemoryKind.__members__.items()}
    return MemoryKinds(
        int(cupti.ActivityKind.MEMORY2), int(cupti.ActivityMemoryOperationType.ALLOCATION), names
    )


def with_memory_apis(cupti: Any, apis: dict[int, dict[int, tuple[str, bool]]]) -> dict:
    """`apis` (capture.Apis, by domain) with each domain's memory APIs added."""
    tables = {
        int(cupti.CallbackDomain.DRIVER_API): cupti.driver_api_trace_cbid,
        int(cupti.CallbackDomain.RUNTIME_API): cupti.runtime_api_trace_cbid,
    }
    return {
        domain: chosen | select_memory_apis(tables[domain].__members__)
        if domain in tables
        else chosen
        for domain, chosen in apis.items()
    }


def memory_records(activities: Iterable[Any], kinds: MemoryKinds) -> list[MemoryRecord]:
    """Copy CUPTI's memory records (cupti-python's ActivityMemory4, valid only in the buffer
    callback) out of `activities`; other kinds are passed over."""
    records = []
    for activity in activities:
        if activity.kind != kinds.activity:
            continue
        operation = ALLOCATION if activity.memory_operation_type == kinds.allocation else RELEASE
        records.append(
            MemoryRecord(
                activity.correlation_id,
                operation,
                kinds.kind_names.get(int(activity.memory_kind), "unknown"),
                int(activity.address),
                int(activity.bytes),
                int(activity.timestamp),
                int(activity.device_id),
                int(activity.stream_id),
                bool(activity.is_async),
            )
        )
    return records


def native_memory_records(rows: Iterable[tuple], kinds: MemoryKinds) -> list[MemoryRecord]:
    """The memory records kname's recorder read in C (Recorder.drain_memory's rows:
    correlation_id, allocation, memory_kind, address, bytes, timestamp, device, stream,
    is_async), as memory_records makes them from cupti-python's."""
    names = kinds.kind_names
    return [
        MemoryRecord(
            row[0], ALLOCATION if row[1] else RELEASE, names.get(row[2], "unknown"), *row[3:]
        )
        for row in rows
    ]


def memory_api(name: str) -> bool:
    """Whether the CUDA API function `name` allocates or frees memory."""
    return name.startswith(MEMORY_APIS)


def select_memory_apis(callback_ids: Mapping[str, int]) -> dict[int, tuple[str, bool]]:
    """{callback id: (API name, False)} for the memory APIs of one CUPTI domain (as
    capture.select_launch_apis does for launches; the runtime's version suffix dropped)."""
    from kname.profiling.capture import _RUNTIME_VERSION

    return {
        int(cbid): (_RUNTIME_VERSION.sub("", name), False)
        for name, cbid in callback_ids.items()
        if memory_api(name)
    }


def view_of(memory_kind: str) -> str:
    """The driver's view a record of CUPTI's memory kind `memory_kind` counts in."""
    return PINNED if memory_kind in HOST_KINDS else DEVICE


class MemoryCalls:
    """In front of the launch join: memory API calls kept here, every other record handed on.
    CUPTI's memory records come in through add_memory, into `ledgers` ({view: Ledger})."""

    def __init__(self, join: Any, recent: int = RECENT_CALLS) -> None:
        self._join = join
        self._sites: OrderedDict[int, str] = OrderedDict()
        self._recent = recent
        self._lock = new_lock()
        self.ledgers: dict[str, Ledger] = {}
        self.unattributed = 0  # records whose call was not seen (or left the window)

    # --- the capture's side: the launch join's interface ----------------------------------------

    def add_launch(self, record: Any) -> None:
        """A launch record: kept here when its API is a memory API, else to the join."""
        if not memory_api(record.api):
            self._join.add_launch(record)
            return
        self.add_calls(((record.correlation_id, record.site),))

    def add_calls(self, calls: Iterable[tuple[int, str]]) -> None:
        """Memory calls the join in C kept apart (their correlation id and site), as add_launch
        keeps a memory call's record."""
        with self._lock:
            for correlation_id, site in calls:
                self._sites[correlation_id] = site
                if len(self._sites) > self._recent:
                    self._sites.popitem(last=False)

    def add_externals(self, *args: Any, **kwargs: Any) -> None:
        """Handed on to the join."""
        self._join.add_externals(*args, **kwargs)

    def add_graph_node(self, record: Any) -> None:
        """Handed on to the join."""
        self._join.add_graph_node(record)

    # --- CUPTI's side --------------------------------------------------------------------------

    def add_memory(self, records: Iterable[MemoryRecord]) -> None:
        """Memory records, each to its line (its call's site) in its view's ledger."""
        with self._lock:
            for record in records:
                ledger = self.ledger(view_of(record.memory_kind))
                if record.operation == ALLOCATION:
                    site = self._sites.get(record.correlation_id)
                    if site is None:
                        self.unattributed += 1
                        site = UNATTRIBUTED
                    ledger.allocate(site, record.address, record.bytes, record.timestamp)
                else:
                    ledger.free(record.address, record.timestamp)

    def ledger(self, view: str) -> Ledger:
        """`view`'s ledger, made at its first record."""
        ledger = self.ledgers.get(view)
        if ledger is None:
            ledger = self.ledgers[view] = Ledger()
        return ledger


class _NoJoin:
    """Where replay_memory's launch records go: nowhere (only the memory calls matter)."""

    def add_launch(self, record: Any) -> None:
        pass

    def add_externals(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_graph_node(self, record: Any) -> None:
        pass


def replay_memory(streams: Streams) -> MemoryCalls:
    """The driver's views of recorded streams: their memory calls, then their memory records."""
    calls = MemoryCalls(_NoJoin())
    for launch in streams.launches:
        calls.add_launch(launch)
    calls.add_memory(streams.memory)
    return calls
