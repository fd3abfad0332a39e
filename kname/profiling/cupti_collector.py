"""kname profile's CUPTI session: subscribing, the activity buffers, flushing, and the lines said.

The launch callback is chosen here (choose): kname's C callback (native_callback.py, on
kname._native_cupti) where it is built, else cupti-python's (python_callback.py), the slower
fallback (on the H200 with cupti-python 13.0.1, +20 µs for a CuPy RawKernel launch to +47 µs for
a torch add); start() says once which.
The activity buffers go with them: with the C callback they are read in C too (its recorder
registers CUPTI's buffer callbacks, copies each record out in CUPTI's thread, then calls
_native_buffer_completed with the GIL), else cupti-python reads them into a Python object per
record (_buffer_completed). With the C callback and no tagging, the recorder also joins the
records in C (native_join.py): `totals` is then that join, and no Python code runs per record or
per buffer (with --memory, the recorder keeps memory API calls apart from the launches and reads
CUPTI's memory records, and _drain_memory hands those alone to the memory join, only after a
buffer that had some); with a stream log asked for (--trace), the recorder keeps the trace's
records in C as well (native_trace.py: `trace`), and every launch call is timed only then
(outermost calls also with KNAME_PROFILE_VERDICT: the launch-bound verdict's CPU time,
launch_times.py, which the joins count only then). The rest (kinds, flush, the messages) is
here, the same for both: before each buffer's records go to the join, the native callback's
finished calls are drained into it, so every GPU record finds its launch.
Everything but the CUPTI calls lives in capture.py and join.py.

Versions: the binding must match the CUPTI library of the CUDA release in use. cupti-python
13.0.* with CUPTI 13.0 (nvidia-cuda-cupti 13.0.x) records everything; cupti-python 13.4 against
CUPTI 13.0 recorded no kernels at all, without any error. stop() says so when launches were seen
and no GPU record arrived.

The API used (cupti-python 13.0.1, module `cupti.cupti`):
    subscribe_v2(callback, userdata, SubscriberParams.ptr) / subscribe(callback, userdata)
        callback(userdata, domain, cbid, CallbackData); raises cuptiError(status), status
        Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED when another tool (Nsight) holds CUPTI;
        SubscriberParams.old_subscriber_name then names it (the native callback calls
        cuptiSubscribe(_v2) itself, and raises cuptiError(status) the same way)
    enable_callback(1, subscriber, CallbackDomain.DRIVER_API | RUNTIME_API, cbid)
        cbids from driver_api_trace_cbid / runtime_api_trace_cbid, chosen by name
    CallbackData.callback_site (ApiCallbackSite.API_ENTER / API_EXIT), .correlation_id
    enable_callback(1, subscriber, CallbackDomain.RESOURCE, cbid): CallbackIdResource's graph
        callbacks (GRAPHNODE_CREATED, GRAPHNODE_CLONED, GRAPH_NODE_UPDATED, *_DESTROY_STARTING);
        the callback's data is then a ResourceData, whose .resource_descriptor points to the
        CUpti_GraphData (GraphData.from_ptr: .node, .graph, .graph_exec, .original_node);
        get_graph_node_id(node), get_graph_id(graph), get_graph_exec_id(graph_exec)
    activity_register_callbacks(requested() -> (size, max_records), completed(list of records))
        records are ActivityKernel10 / ActivityMemcpy6 / ActivityMemset4 /
        ActivityExternalCorrelation objects, read inside the callback only (the Python path;
        the native recorder calls cuptiActivityRegisterCallbacks and cuptiActivityFlushAll
        itself, on the same libcupti)
    activity_enable(ActivityKind.CONCURRENT_KERNEL | MEMCPY | MEMSET | EXTERNAL_CORRELATION),
        activity_disable(kind), activity_flush_all(1) (forced), get_timestamp() (ns)
    activity_push_external_correlation_id(ExternalCorrelationKind.CUSTOM0, id) and
        activity_pop_external_correlation_id(kind): around each launch kname wraps, when made
        with external_correlation=True (CUPTI then also needs ActivityKind.DRIVER and RUNTIME)
    unsubscribe(subscriber)
Without a CUDA driver every call raises cupti._internal.utils.NotSupportedError.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable
from importlib import metadata
from typing import Any

from kname import hotpath
from kname._warnings import report_fault, warn_once
from kname.profiling.capture import (
    ActivityKinds,
    Apis,
    GraphCallbacks,
    LaunchCapture,
    activity_records,
    memcpy_work_name,
    select_graph_callbacks,
)
from kname.profiling.capture import select_launch_apis as _select
from kname.profiling.join import Join
from kname.profiling.memory_join import (
    MEMORY_KINDS,
    MemoryCalls,
    MemoryKinds,
    memory_api,
    memory_kinds,
    memory_records,
    native_memory_records,
    with_memory_apis,
)
from kname.profiling.native_callback import (
    MAX_WAITING_RECORDS,
    NativeCallbacks,
    NativeUnavailable,
)
from kname.profiling.native_join import NativeJoin
from kname.profiling.native_trace import NativeTrace
from kname.profiling.python_callback import PythonCallbacks
from kname.profiling.records import ActivityRecord, ExternalCorrelation, MemoryRecord, StreamLog

BUFFER_BYTES = 8 << 20  # per CUPTI activity buffer; cupti-python or the recorder allocates them
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: also hand over incomplete buffers
ACTIVITY_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "EXTERNAL_CORRELATION")
# CUPTI writes an external correlation record only beside an API activity record
# (cupti_activity.h, cuptiActivityPushExternalCorrelationId), so tagging needs these too.
API_KINDS = ("DRIVER", "RUNTIME")
NOT_COLLECTED = "GPU times are not collected in this run; launches are still named"


class CuptiCollector:
    """Subscribes to CUPTI: launch callbacks to `capture` (native or Python: choose), activity
    records to `join`."""

    def __init__(
        self,
        capture: LaunchCapture,
        join: Join,
        log: StreamLog | None = None,
        buffer_bytes: int = BUFFER_BYTES,
        external_correlation: bool = False,
        memory: MemoryCalls | None = None,
        time_outer_calls: bool = False,
    ) -> None:
        self._capture = capture
        self._join = join
        self._log = log
        self._buffer_bytes = buffer_bytes
        # Tag wrapped launches with CUPTI external correlation ids. Off by default here: it
        # needs an API record per CUDA call, each a Python object in this binding, while the
        # launch callback already gets a wrapped launch's site from its wrapper.
        self._external_correlation = external_correlation
        # kname profile --memory: memory calls and CUPTI's memory records to it (memory_join.py);
        # the native recorder reads the memory records in C too and hands over only those.
        self._memory = memory
        self._memory_kinds: MemoryKinds | None = None
        # The launch-bound verdict's CPU time per line (KNAME_PROFILE_VERDICT): outermost launch
        # calls timed in C, two cuptiGetTimestamp calls a launch (docs/verdict.md: its cost).
        self._time_outer_calls = time_outer_calls
        self._cupti: Any = None
        self._callbacks: Any = None  # NativeCallbacks or PythonCallbacks (choose)
        self._enabled_kinds: list[int] = []
        self._copy_kinds: dict[int, str] = {}
        self._native_buffers = False  # the native recorder reads CUPTI's buffers
        self._totals: Join | NativeJoin = join  # where the totals are kept: here, or in C
        self._trace: NativeTrace | None = None  # the trace kept in C (the log then stays empty)
        self._holder: str | None = None
        self.started = False
        self.not_started: str | None = None  # why the last start() failed, in a few words

    def start(self) -> bool:
        """Start collecting; False (after one line on stderr) when CUPTI cannot be used."""
        try:
            from cupti import cupti
        except Exception as exc:  # ImportError, or OSError loading libcupti
            self.not_started = f"the CUPTI binding cannot be imported: {_reason(exc)}"
            warn_once(
                "profile:import",
                f"profile: the CUPTI binding cannot be imported ({_reason(exc)}); "
                "install it with: pip install 'kname[profile]' (cupti-python of your CUDA "
                f"release, e.g. 'cupti-python==13.0.*' for CUDA 13.0). {NOT_COLLECTED}",
            )
            return False
        self._cupti = cupti
        apis = launch_apis(cupti)
        if self._memory is not None:
            apis = with_memory_apis(cupti, apis)
            self._memory_kinds = memory_kinds(cupti)
        graphs = select_graph_callbacks(cupti.CallbackIdResource.__members__)
        kinds = cupti.ActivityKind
        self._kinds = ActivityKinds(
            frozenset({int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL)}),
            int(kinds.MEMCPY),
            int(kinds.MEMSET),
            int(kinds.EXTERNAL_CORRELATION),
        )
        if not self._subscribe(cupti, apis, graphs):
            return False
        try:
            # Buffers before kinds: records may be produced as soon as a kind is enabled.
            self._take_buffers(cupti)
            for name in ACTIVITY_KINDS + self._more_kinds():
                cupti.activity_enable(getattr(kinds, name))
                self._enabled_kinds.append(int(getattr(kinds, name)))
        except Exception as exc:
            self._say_not_started(cupti, exc)
            self._undo()
            return False
        self.started = True
        self.not_started = None
        warn_once(
            "profile:collector",
            f"profile: collecting through {self._callbacks.describe()}; GPU times are not affected",
        )
        return True

    def stop(self) -> None:
        """Unsubscribe, stop the records, then flush every buffer: each launch called back keeps
        its GPU record (finished work's records arrive now)."""
        if not self.started:
            return
        self.started = False
        # The launches first, their records after (issue 41): a launch called back while its
        # record's kind was still enabled has one, and the flush comes after the last of them.
        # Flushed before the kinds were disabled, a launch called back in between kept none.
        self._unsubscribe()
        self._disable_kinds()
        try:
            self._flush()
        except Exception as exc:
            report_fault("flushing CUPTI's activity buffers", exc)
        self._release_buffers()
        self._take_what_is_left()
        launches = self._totals.launch_count
        if launches and not self._totals.record_count:
            versions = ", ".join(f"{k} {v}" for k, v in binding_versions().items())
            warn_once(
                "profile:no-records",
                f"profile: CUPTI delivered no GPU records for "
                f"{launches} launch calls ({versions}): the binding and the "
                "CUPTI library must come from the same CUDA release (for CUDA 13.0: "
                "pip install 'cupti-python==13.0.*' 'nvidia-cuda-cupti==13.0.*')",
            )

    def flush(self) -> None:
        """Hand every GPU record finished so far to the join, and collect on (a flush of a long
        run's profile; the session's lock keeps it apart from stop())."""
        if not self.started:
            return
        try:
            self._flush()
        except Exception as exc:
            report_fault("flushing CUPTI's activity buffers", exc)
        self._take_what_is_left()

    def finalize_later(self) -> bool:
        """After stop(): CUPTI detached from the process (cuptiFinalize) at the next CUDA API
        call's exit, so that launches cost what they did before it started; a later start()
        subscribes again. False where it cannot (the Python callback; CUPTI refused)."""
        finalize = getattr(self._callbacks, "finalize_later", None)
        if self.started or finalize is None:
            return False
        try:
            status = finalize()
        except Exception as exc:
            report_fault("detaching CUPTI (cuptiFinalize)", exc)
            return False
        if status:
            warn_once(
                "profile:finalize",
                f"profile: CUPTI could not be detached (status {status}); launches may cost "
                "more than before the profile until the process ends",
            )
        return not status

    def current_device(self) -> int | None:
        """The ordinal of the device of the calling thread's CUDA context (the GPU a rank's
        main thread works on), or None where it has none."""
        try:
            driver = ctypes.CDLL("libcuda.so.1")
            ordinal = ctypes.c_int(-1)
            if driver.cuCtxGetDevice(ctypes.byref(ordinal)) == 0:
                return ordinal.value
        except (OSError, AttributeError):
            pass
        return None

    @property
    def launch_callbacks(self) -> str:
        """Which launch callbacks collect (native or Python, and why), once started."""
        return "" if self._callbacks is None else self._callbacks.describe()

    @property
    def totals(self) -> Join | NativeJoin:
        """The join that keeps the totals: the one given, or, with the native recorder and
        nothing tagged, the recorder's own join in C (read as a Join)."""
        return self._totals

    @property
    def trace(self) -> NativeTrace | None:
        """With the native recorder, nothing tagged and a stream log asked for: the trace it
        keeps in C (the log gets the records of earlier runs only); else None."""
        return self._trace

    @property
    def activity_reader(self) -> str:
        """Who reads CUPTI's activity buffers, once started: "native" (kname's recorder, in C)
        or "python" (cupti-python, a Python object per record)."""
        if self._callbacks is None:
            return ""
        return "native" if self._native_buffers else "python"

    def activity_counts(self) -> dict[str, int]:
        """The native recorder's counts of GPU records (waiting, dropped past its bound,
        dropped by CUPTI) and kernel names; empty where cupti-python reads the buffers."""
        if not self._native_buffers:
            return {}
        return self._callbacks.recorder.activity_counts()

    def external_calls(self) -> tuple[Callable[[int], Any], Callable[[], Any]] | None:
        """push(id) and pop() of a CUPTI external correlation id on this thread (CUSTOM0): the
        launch API calls made in between, and so their GPU records, are linked to `id`. None
        unless made with external_correlation=True."""
        if not self._external_correlation:
            return None
        cupti = self._cupti
        kind = int(cupti.ExternalCorrelationKind.CUSTOM0)
        return (
            functools.partial(cupti.activity_push_external_correlation_id, kind),
            functools.partial(cupti.activity_pop_external_correlation_id, kind),
        )

    # --- CUPTI's activity callbacks: never raise into CUPTI --------------------------------

    def _buffer_requested(self) -> tuple[int, int]:
        return self._buffer_bytes, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: list) -> None:
        self._callbacks.drain()  # first: every record of this buffer then finds its launch
        try:
            self._add(*activity_records(activities, self._kinds, self._copy_kind_name))
            if self._memory_kinds is not None:
                self._add_memory(memory_records(activities, self._memory_kinds))
        except Exception as exc:
            report_fault("reading CUPTI's activity records", exc)

    def _add_memory(self, records: list[MemoryRecord]) -> None:
        if records and self._memory is not None:
            self._memory.add_memory(records)
            if self._log is not None:
                self._log.add_memory(records)

    def _more_kinds(self) -> tuple[str, ...]:
        """The activity kinds enabled beyond ACTIVITY_KINDS: the API records tagging needs,
        and the memory records of --memory."""
        more = API_KINDS if self._external_correlation else ()
        return more + (MEMORY_KINDS if self._memory is not None else ())

    def _native_buffer_completed(self) -> None:
        """The recorder read a buffer (in C): its records, after the launches, to the join."""
        self._callbacks.drain()  # first, as above
        try:
            self._add(*self._callbacks.drain_activities(self._memcpy_name))
        except Exception as exc:
            report_fault("reading CUPTI's activity records", exc)
        self._drain_memory()

    def _drain_memory(self) -> None:
        """--memory, the recorder reading the buffers: the memory calls it kept apart (the join
        in C), then CUPTI's memory records, to the memory join. Never raises."""
        if self._memory is None or self._memory_kinds is None or not self._native_buffers:
            return
        try:
            calls, rows, dropped = self._callbacks.drain_memory()
            self._memory.add_calls(calls)
            self._add_memory(native_memory_records(rows, self._memory_kinds))
        except Exception as exc:
            report_fault("reading CUPTI's memory records", exc)
            return
        if dropped:
            warn_once(
                "profile:native-memory-records",
                f"profile: more than {MAX_WAITING_RECORDS} memory calls or records waited to "
                "be read; later ones were not kept, and their bytes are missing",
            )

    def _take_what_is_left(self) -> None:
        """After a flush: calls that finished after the last buffer (no GPU record), and
        records left over, to the join."""
        if self._totals is not self._join:
            self._join_in_c_now()
        elif self._native_buffers:
            self._native_buffer_completed()
        else:
            self._callbacks.drain()

    def _join_in_c_now(self) -> None:
        try:
            self._callbacks.join_now()
        except Exception as exc:
            report_fault("joining CUPTI's activity records", exc)
        self._drain_memory()
        self._callbacks.report()

    def _add(self, work: list[ActivityRecord], externals: list[ExternalCorrelation]) -> None:
        if externals:
            self._join.add_externals(externals)
        self._join.add_activities(work)
        if self._log is not None:
            self._log.add_activities(work)
            if externals:
                self._log.add_externals(externals)

    # --- helpers ------------------------------------------------------------------------------

    def _take_buffers(self, cupti: Any) -> None:
        """CUPTI's activity buffers to the native recorder where it collects, else cupti-python's
        callbacks; raises the binding's error."""
        self._native_buffers = self._callbacks.reads_activity_buffers
        if not self._native_buffers:
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            return
        if self._memory is not None:  # memory calls and records read in C, handed over alone
            self._callbacks.keep_memory(memory_api)
        # With nothing tagged, the records need not become Python objects at all: the join is
        # in C, and so is the trace when one is kept. Only the trace reads launch times.
        in_c = not self._external_correlation
        self._callbacks.time_launches(self._log is not None)
        self._callbacks.time_outer_launches(self._time_outer_calls)
        if in_c:
            earlier = self._totals if isinstance(self._totals, NativeJoin) else None
            self._totals = self._callbacks.join_in_c(self._memcpy_name, earlier)
            if self._log is not None:
                if self._trace is not None:  # started again: the last run's trace to the log
                    self._trace.move_into(self._log)
                room = max(self._log.max_records - self._log.kept, 0)  # one cap for every run
                self._trace = self._callbacks.keep_trace(room, self._memcpy_name)
        if not in_c:
            completed = self._native_buffer_completed
        else:  # called only when memory calls or records wait
            completed = self._drain_memory if self._memory is not None else None
        status = self._callbacks.take_activity_buffers(self._buffer_bytes, completed)
        if status:
            raise cupti.cuptiError(status)

    def _flush(self) -> None:
        """Every buffer handed over now, incomplete ones too (their records are complete)."""
        if not self._native_buffers:
            self._cupti.activity_flush_all(FLUSH_FORCED)
            return
        status = self._callbacks.flush_activities(FLUSH_FORCED)
        if status:
            raise self._cupti.cuptiError(status)

    def _memcpy_name(self, copy_kind: int) -> str:
        return memcpy_work_name(self._copy_kind_name(copy_kind))

    def _copy_kind_name(self, copy_kind: int) -> str:
        name = self._copy_kinds.get(copy_kind)
        if name is None:
            try:
                name = self._cupti.ActivityMemcpyKind(copy_kind).name
            except ValueError:
                name = "UNKNOWN"
            self._copy_kinds[copy_kind] = name
        return name

    def _subscribe(self, cupti: Any, apis: Apis, graphs: GraphCallbacks) -> bool:
        """Launch and graph callbacks on (native where it can reach CUPTI's functions); False,
        said in one line, when CUPTI refuses."""
        self._callbacks = choose(self._capture)
        self._holder = None
        try:
            try:
                self._callbacks.subscribe(cupti, apis, graphs)
            except NativeUnavailable as exc:
                self._callbacks.unsubscribe()
                self._callbacks = PythonCallbacks(self._capture, f"the native one: {exc}")
                self._callbacks.subscribe(cupti, apis, graphs)
        except Exception as exc:
            self._holder = self._callbacks.holder
            self._say_not_started(cupti, exc)
            self._undo()
            return False
        return True

    def _say_not_started(self, cupti: Any, exc: Exception) -> None:
        status = getattr(exc, "status", None)
        if status == int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED):
            holder = f"'{self._holder}'" if self._holder else "another tool"
            self.not_started = f"CUPTI is already in use by {holder}"
            warn_once(
                "profile:subscriber",
                f"profile: CUPTI is already in use by {holder} (Nsight Systems, Nsight "
                f"Compute or another profiler take its one subscriber); {NOT_COLLECTED}. Run "
                "without that profiler to get kname's GPU times",
            )
            return
        reason = _reason(exc)
        if status is not None:
            with contextlib.suppress(ValueError):
                reason = f"{cupti.Result(status).name}: {reason}"
        self.not_started = f"CUPTI could not start: {reason}"
        warn_once(
            "profile:start", f"profile: CUPTI could not be started ({reason}); {NOT_COLLECTED}"
        )

    def _undo(self) -> None:
        self._unsubscribe()
        self._disable_kinds()
        self._release_buffers()

    def _unsubscribe(self) -> None:
        """No launch is called back from now on."""
        try:
            self._callbacks.unsubscribe()
        except Exception as exc:
            report_fault("unsubscribing from CUPTI", exc)

    def _disable_kinds(self) -> None:
        """No GPU record is made for a launch from now on."""
        for kind in self._enabled_kinds:
            try:
                self._cupti.activity_disable(kind)
            except Exception as exc:
                report_fault("disabling CUPTI activity collection", exc)
        self._enabled_kinds.clear()

    def _release_buffers(self) -> None:
        if self._native_buffers:
            self._callbacks.release_activity_buffers()  # after the flush: no record comes now


def choose(capture: LaunchCapture) -> NativeCallbacks | PythonCallbacks:
    """The callbacks this process uses: native where the extension is there and allowed."""
    module, why = hotpath.current().cupti()
    if module is None:
        return PythonCallbacks(capture, why)
    return NativeCallbacks(module, capture)


def launch_apis(cupti: Any) -> Apis:
    """The driver and runtime launch APIs kname profile subscribes to, as the binding numbers
    them: {callback domain: {callback id: (API name, is a graph launch)}}."""
    return {
        int(cupti.CallbackDomain.DRIVER_API): _select(cupti.driver_api_trace_cbid.__members__),
        int(cupti.CallbackDomain.RUNTIME_API): _select(cupti.runtime_api_trace_cbid.__members__),
    }


def binding_versions() -> dict[str, str]:
    """The installed versions of the CUPTI binding and of the CUPTI library's wheel."""
    versions = {}
    for distribution in ("cupti-python", "nvidia-cuda-cupti"):
        try:
            versions[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            versions[distribution] = "not installed"
    return versions


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")
