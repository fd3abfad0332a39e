"""kname._native_cupti's Recorder as kname profile drives it: CUPTI's callback in C.

A cached call site costs a frame look-up; the recorder's records reach the capture when drained
(before each activity buffer is read, and at stop). It also reads CUPTI's activity buffers in C
(reads_activity_buffers): each record copied out of the buffer into a C struct in CUPTI's
thread, handed to the collector after; or, with nothing tagged, joined to its launch right there,
in C (join_in_c: native_join.py), with no Python object per record, and kept there for the trace
when one is asked for (keep_trace: native_trace.py). It names each call by capture.py's rules, as
cupti-python's callback does (python_callback.py, the fallback), and takes CUPTI's graph resource
callbacks too. The hot path of this install decides which runs (cupti_collector.choose).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname import callsite, hotpath
from kname._warnings import report_fault, warn_once
from kname.profiling import backward
from kname.profiling.capture import (
    MAX_OPEN_CALLS,
    NO_PYTHON_FRAME,
    SITE_KEY,
    UNNAMED,
    Apis,
    GraphCallbacks,
    LaunchCapture,
    say_open_calls_forgotten,
    site_of_frame,
)
from kname.profiling.graphs import MAX_NODES, RECENT_NODES, say_nodes_not_kept
from kname.profiling.join import MAX_PENDING, RECENT_WINDOW, UNATTRIBUTED, say_pending_dropped
from kname.profiling.native_join import NativeJoin
from kname.profiling.native_trace import NativeTrace
from kname.profiling.records import (
    NODE_EVENTS,
    ActivityRecord,
    ExternalCorrelation,
    GraphNodeRecord,
    LaunchRecord,
)

MAX_WAITING_RECORDS = 1_000_000  # GPU records read in C and not yet handed to the join


class NativeUnavailable(Exception):
    """The native callback cannot reach CUPTI's functions here (the Python one still may)."""


class NativeCallbacks:
    """CUPTI's callback in C (kname._native_cupti.Recorder) on the libcupti the binding loaded."""

    reads_activity_buffers = True  # in C: take_activity_buffers, drain_activities

    def __init__(self, module: ModuleType, capture: LaunchCapture) -> None:
        self._module = module
        self._capture = capture
        self.recorder: Any = None
        self.holder: str | None = None
        self._pairs: list[tuple[str, bool]] = []  # the recorder's (API name, graph), by index

    def describe(self) -> str:
        """What collects, for the line said at start."""
        return f"kname's native CUPTI callback ({hotpath.NATIVE_CUPTI}, in C)"

    def make_recorder(self, apis: list[tuple[str, bool]]) -> Any:
        """A Recorder for these (API name, graph) pairs, by kname's rules of the moment."""
        self.recorder = self._module.Recorder(
            apis=apis,
            sites=callsite.sites,
            kinds=callsite._kinds,  # read-only use of kname's own registry, as capture's walk
            site_of_frame=site_of_frame,
            site_key=SITE_KEY,
            no_frame=NO_PYTHON_FRAME,
            unnamed=UNNAMED,
            max_pending=MAX_PENDING,
            max_open_calls=MAX_OPEN_CALLS,
        )
        return self.recorder

    def take_wrapped_sites(self) -> None:
        """From now on the launches kname wraps tell the recorder their site (in C), and so do
        backward passes, for the launches with no Python frame (kname.profiling.backward)."""
        recorder = self.recorder
        self._capture.mark_wrapped_with(recorder.mark, recorder.unmark, recorder.site_calls)
        backward.listen(recorder.set_frameless)
        backward.listen_forward(recorder.set_frameless_namer)

    def subscribe(self, cupti: Any, apis: Apis, graphs: GraphCallbacks | None = None) -> None:
        """Subscribe and enable `apis` (and `graphs`); raises the binding's error for a CUPTI
        status, and NativeUnavailable when libcupti's functions cannot be had (nothing
        subscribed then)."""
        # A finalize still waiting (finalize_later) is called off before CUPTI is called: it
        # must not run while this thread is inside CUPTI, and CUPTI takes one subscriber.
        self._module.cancel_finalize()
        cupti.get_timestamp()  # the binding loads libcupti now (and raises without a driver)
        path = libcupti_path()
        pairs = sorted({pair for chosen in apis.values() for pair in chosen.values()})
        index = {pair: number for number, pair in enumerate(pairs)}
        recorder = self.make_recorder(pairs)
        self._pairs = pairs
        try:
            status, self.holder = recorder.subscribe(path)
        except OSError as exc:
            raise NativeUnavailable(f"libcupti {path}: {exc}") from None
        if status:
            raise cupti.cuptiError(status)
        for domain, chosen in apis.items():
            for cbid, pair in chosen.items():
                status = recorder.enable(domain, cbid, index[pair])
                if status:
                    raise cupti.cuptiError(status)
        for cbid, event in (graphs or {}).items():
            status = recorder.enable_graph(cbid, NODE_EVENTS.index(event) + 1)
            if status:
                raise cupti.cuptiError(status)
        self.take_wrapped_sites()

    def unsubscribe(self) -> None:
        """No callback after this (and nothing in C touches Python any more)."""
        if self.recorder is not None:
            backward.listen(None)
            backward.listen_forward(None)
            self.recorder.unsubscribe()

    def finalize_later(self) -> int:
        """After unsubscribe and the last flush: CUPTI finalized (detached from the process) at
        the next CUDA driver or runtime API exit; CUPTI's status (0: it waits for that exit)."""
        return self.recorder.finalize_later()

    def drain(self) -> None:
        """The calls finished so far into the capture (those still open stay), and what the
        callback had to say (a fault, forgotten calls, calls past the bound) said once."""
        recorder = self.recorder
        if recorder is None:
            return
        try:
            self._capture.add(recorder.drain(LaunchRecord))
            self._capture.add_graph_nodes(recorder.drain_graph_nodes(GraphNodeRecord))
        except Exception as exc:
            report_fault("reading kname's native launch records", exc)
            return
        self.report()

    def report(self) -> None:
        """What the callback had to say (a fault, forgotten calls, calls past the bound), the
        join in C (launches dropped at its bound, memory it lacked), and the activity records
        lost (say_activity_losses), said once."""
        recorder = self.recorder
        if recorder is None:
            return
        try:
            fault = recorder.take_fault()
            if fault is not None:
                report_fault(*fault)
            if recorder.take_forgotten():
                say_open_calls_forgotten()
            counts = recorder.counts()
            joined = recorder.join_counts()
            read = recorder.activity_counts()
        except Exception as exc:
            report_fault("reading kname's native launch records", exc)
            return
        say_activity_losses(read)  # with the join in C, no drain_activities() says them
        if joined["trimmed"]:
            say_pending_dropped(MAX_PENDING)
        if joined["nodes_capped"]:
            say_nodes_not_kept(MAX_NODES)
        if joined["no_memory"]:
            warn_once(
                "profile:native-memory",
                "profile: kname ran out of memory while joining GPU records; some were not counted",
            )
        if counts["dropped"]:
            warn_once(
                "profile:native-pending",
                f"profile: more than {MAX_PENDING} launch calls waited for CUPTI's activity "
                "records; later ones were not recorded, and the GPU work they caused counts "
                "as unattributed",
            )
        if counts["graph_nodes_dropped"]:
            warn_once(
                "profile:native-graph-nodes",
                f"profile: more than {MAX_PENDING} CUDA graph node events waited to be joined; "
                "later ones were not recorded, and the GPU work of those nodes counts under "
                "the line that replayed their graph",
            )

    # --- CUPTI's activity buffers, read in C -------------------------------------------------

    def take_activity_buffers(self, buffer_bytes: int, completed: Callable[[], Any] | None) -> int:
        """CUPTI's activity buffers (of `buffer_bytes`) go to the recorder, which reads them in
        CUPTI's thread and then calls completed() with the GIL (None: nothing is called, the
        join being in C; with the join in C, only when memory calls or records wait); CUPTI's
        status (0: taken)."""
        return self.recorder.take_activity_buffers(buffer_bytes, MAX_WAITING_RECORDS, completed)

    def join_in_c(
        self, memcpy_name: Callable[[int], str], earlier: NativeJoin | None = None
    ) -> NativeJoin:
        """From now on the recorder joins the GPU records itself, in C (join.py's rules and
        bounds); what it keeps (after `earlier`'s), read as a Join. Before
        take_activity_buffers()."""
        self.recorder.join_in_c(MAX_PENDING, RECENT_WINDOW, UNATTRIBUTED, MAX_NODES, RECENT_NODES)
        return NativeJoin(self.recorder, memcpy_name, earlier)

    def keep_trace(self, max_records: int, memcpy_name: Callable[[int], str]) -> NativeTrace:
        """From now on what the join in C is given is kept for the trace too, in C (at most
        `max_records` records), launch calls timed. After join_in_c(), before
        take_activity_buffers()."""
        self.recorder.keep_trace(max_records)
        return NativeTrace(self.recorder, memcpy_name)

    def time_launches(self, timed: bool) -> None:
        """Whether launch calls get CPU timestamps (two cuptiGetTimestamp calls each): only a
        trace or a stream log reads them."""
        self.recorder.time_launches(timed)

    def time_outer_launches(self, timed: bool) -> None:
        """Whether outermost launch calls get CPU timestamps (the launch-bound verdict's CPU
        time per line): two cuptiGetTimestamp calls per launch."""
        self.recorder.time_outer_launches(timed)

    def keep_memory(self, is_memory_api: Callable[[str], bool]) -> None:
        """kname profile --memory: CUPTI's memory records read in C too, and, with the join in
        C, the calls of the APIs is_memory_api(name) picks kept apart from the launches, both
        for drain_memory(). Before take_activity_buffers()."""
        flags = bytes(is_memory_api(name) for name, _ in self._pairs)
        self.recorder.keep_memory(flags, MAX_WAITING_RECORDS)

    def drain_memory(self) -> tuple[list[tuple[int, str]], list[tuple], int]:
        """The memory calls kept apart [(correlation id, site)] and CUPTI's memory records read
        so far (Recorder.drain_memory's rows), and how many were not kept."""
        return self.recorder.drain_memory()

    def join_now(self) -> None:
        """The calls finished and the GPU records read so far, joined in C now."""
        self.recorder.join_now()

    def flush_activities(self, flag: int) -> int:
        """cuptiActivityFlushAll(flag), the GIL released; CUPTI's status."""
        return self.recorder.flush_activities(flag)

    def release_activity_buffers(self) -> None:
        """Buffers completed from now on are freed unread."""
        if self.recorder is not None:
            self.recorder.release_activity_buffers()

    def drain_activities(
        self, memcpy_name: Callable[[int], str]
    ) -> tuple[list[ActivityRecord], list[ExternalCorrelation]]:
        """The GPU records read so far (memcpy_name(copy kind) names a copy), and what was lost
        on the way (past the bound, dropped by CUPTI, names past theirs) said once."""
        recorder = self.recorder
        records = recorder.drain_activities(ActivityRecord, ExternalCorrelation, memcpy_name)
        say_activity_losses(recorder.activity_counts())
        return records


def say_activity_losses(counts: dict[str, int]) -> None:
    """What the recorder lost of CUPTI's activity records (past its bound, dropped by CUPTI,
    kernel names past theirs), each said once."""
    if counts["dropped"]:
        warn_once(
            "profile:native-records",
            f"profile: more than {MAX_WAITING_RECORDS} GPU records waited to be joined; "
            "later ones were not kept, and their GPU time is missing from the profile",
        )
    if counts["cupti_dropped"]:
        warn_once(
            "profile:cupti-dropped",
            f"profile: CUPTI dropped {counts['cupti_dropped']} GPU records (no activity "
            "buffer was free); their GPU time is missing from the profile",
        )
    if counts["names_past_bound"]:
        warn_once(
            "profile:kernel-names",
            f"profile: more than {counts['names']} distinct kernel names; kernels with "
            "later names are counted under one name",
        )


def libcupti_path() -> str:
    """The absolute path of the libcupti in this process: the one cupti-python loaded, else the
    one cuda.pathfinder finds (it looks for a loaded one first, as the binding does)."""
    loaded = _loaded_libcupti()
    if loaded is not None:
        return loaded
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return load_nvidia_dynamic_lib("cupti").abs_path
    except Exception as exc:
        raise NativeUnavailable(f"libcupti was not found ({type(exc).__name__}: {exc})") from None


def _loaded_libcupti() -> str | None:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if "/libcupti.so" in f"/{path}":
                    return f"/{path}"
    except OSError:
        pass
    return None
