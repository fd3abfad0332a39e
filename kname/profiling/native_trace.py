"""The trace kname._native_cupti's recorder keeps in C, for `--trace` on the native path.

With kname's native CUPTI callback and nothing tagged, the recorder joins the records in C
(native_join.py) and, when a trace is asked for, keeps copies of what its join is given: launch
calls, graph node events and GPU records, as C structs, up to one cap on them all
(kname/profiling/_cupti_c/trace.c). The trace's JSON is then written in C (trace_json.c beside it),
in one pass, exactly as trace.py writes it for the same streams; Python is asked once per name (its
JSON form, a kernel's display name), never per record. The streams themselves are made Python
records only when asked (save_streams, a fixture recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any

from kname._version import __version__
from kname.documents.kernel_names import display_name
from kname.documents.text import os_text
from kname.profiling.join import UNATTRIBUTED
from kname.profiling.records import (
    ActivityRecord,
    ExternalCorrelation,
    GraphNodeRecord,
    LaunchRecord,
    StreamLog,
    Streams,
)


class NativeTrace:
    """The recorder's trace: its counts, its records as Streams, and its JSON."""

    def __init__(self, recorder: Any, memcpy_name: Callable[[int], str]) -> None:
        self._recorder = recorder
        self._memcpy_name = memcpy_name

    def counts(self) -> dict[str, int]:
        """Launch calls, graph node events and GPU records kept; those dropped past the cap."""
        return self._recorder.trace_counts()

    def streams(self, external_sites: Mapping[int, str] | None = None, **meta: Any) -> Streams:
        """What the trace keeps, as recorded streams (a Python record each, made now)."""
        launches, activities, externals, nodes = self._recorder.trace_streams(
            LaunchRecord, ActivityRecord, ExternalCorrelation, GraphNodeRecord, self._memcpy_name
        )
        meta = dict(meta, dropped_records=self.counts()["dropped"])
        return Streams(launches, activities, externals, dict(external_sites or {}), meta, nodes)

    def trace_json(self, meta: Mapping[str, Any]) -> str:
        """trace.trace_json(self.streams(**meta)), written in C."""
        return self._recorder.trace_json(
            int(meta.get("pid", 1)),
            os_text(str(meta.get("program") or "program")),  # as trace.py writes it
            __version__,
            UNATTRIBUTED,
            encode_basestring,
            display_name,
            self._memcpy_name,
        )

    def move_into(self, log: StreamLog) -> None:
        """Its records into `log`, as Python records (a collector started again: the earlier
        run's trace goes on in Python, the next run's in C)."""
        streams = self.streams()
        for launch in streams.launches:
            log.launch(launch)
        for node in streams.graph_nodes:
            log.graph_node(node)
        log.add_activities(streams.activities)
        log.add_externals(streams.externals)
        log.dropped += streams.meta["dropped_records"]


def merged(first: Streams, then: Streams) -> Streams:
    """Two parts of one run's streams, one after the other (the meta of the first, with the
    records dropped by both)."""
    meta = dict(first.meta)
    meta["dropped_records"] = meta.get("dropped_records", 0) + then.meta.get("dropped_records", 0)
    return Streams(
        first.launches + then.launches,
        first.activities + then.activities,
        first.externals + then.externals,
        {**first.external_sites, **then.external_sites},
        meta,
        first.graph_nodes + then.graph_nodes,
    )
