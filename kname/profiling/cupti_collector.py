"""The CUPTI binding (cupti-python): launch API callbacks and activity buffers, in Python.

This is the slower fallback: each launch pays a Python callback (on the H200 with
cupti-python 13.0.1, +20 µs for a CuPy RawKernel launch to +47 µs for a torch add), and says so
once. Everything but the CUPTI calls lives in capture.py and join.py.

Versions: the binding must match the CUPTI library of the CUDA release in use. cupti-python
13.0.* with CUPTI 13.0 (nvidia-cuda-cupti 13.0.x) records everything; cupti-python 13.4 against
CUPTI 13.0 recorded no kernels at all, without any error. stop() says so when launches were seen
and no GPU record arrived.

The API used (cupti-python 13.0.1, module `cupti.cupti`):
    subscribe_v2(callback, userdata, SubscriberParams.ptr) / subscribe(callback, userdata)
        callback(userdata, domain, cbid, CallbackData); raises cuptiError(status), status
        Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED when another tool (Nsight) holds CUPTI;
        SubscriberParams.old_subscriber_name then names it
    enable_callback(1, subscriber, CallbackDomain.DRIVER_API | RUNTIME_API, cbid)
        cbids from driver_api_trace_cbid / runtime_api_trace_cbid, chosen by name
    CallbackData.callback_site (ApiCallbackSite.API_ENTER / API_EXIT), .correlation_id
    activity_register_callbacks(requested() -> (size, max_records), completed(list of records))
        records are ActivityKernel10 / ActivityMemcpy6 / ActivityMemset4 /
        ActivityExternalCorrelation objects, read inside the callback only
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
import functools
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

from kname._warnings import report_fault, warn_once
from kname.profiling.capture import ActivityKinds, LaunchCapture, activity_records
from kname.profiling.capture import select_launch_apis as _select
from kname.profiling.join import Join
from kname.profiling.records import StreamLog

BUFFER_BYTES = 8 << 20  # per CUPTI activity buffer; cupti-python allocates and frees them
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: also hand over incomplete buffers
ACTIVITY_KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "EXTERNAL_CORRELATION")
# CUPTI writes an external correlation record only beside an API activity record
# (cupti_activity.h, cuptiActivityPushExternalCorrelationId), so tagging needs these too.
API_KINDS = ("DRIVER", "RUNTIME")
SUBSCRIBER_NAME = "kname"
NOT_COLLECTED = "GPU times are not collected in this run; launches are still named"


class CuptiCollector:
    """Subscribes to CUPTI, feeds launch callbacks to `capture`, activity records to `join`."""

    def __init__(
        self,
        capture: LaunchCapture,
        join: Join,
        log: StreamLog | None = None,
        buffer_bytes: int = BUFFER_BYTES,
        external_correlation: bool = False,
    ) -> None:
        self._capture = capture
        self._join = join
        self._log = log
        self._buffer_bytes = buffer_bytes
        # Tag wrapped launches with CUPTI external correlation ids. Off by default here: it
        # needs an API record per CUDA call, each a Python object in this binding, while the
        # launch callback already gets a wrapped launch's site from its wrapper.
        self._external_correlation = external_correlation
        self._cupti: Any = None
        self._subscriber: int | None = None
        self._userdata: list = []  # kept alive for CUPTI's callback, as in NVIDIA's samples
        self._enabled_kinds: list[int] = []
        self._copy_kinds: dict[int, str] = {}
        self._holder: str | None = None
        self.started = False

    def start(self) -> bool:
        """Start collecting; False (after one line on stderr) when CUPTI cannot be used."""
        try:
            from cupti import cupti
        except Exception as exc:  # ImportError, or OSError loading libcupti
            warn_once(
                "profile:import",
                f"profile: the CUPTI binding cannot be imported ({_reason(exc)}); "
                "install it with: pip install 'kname[profile]' (cupti-python of your CUDA "
                f"release, e.g. 'cupti-python==13.0.*' for CUDA 13.0). {NOT_COLLECTED}",
            )
            return False
        self._cupti = cupti
        self._enter = int(cupti.ApiCallbackSite.API_ENTER)
        self._apis = {
            int(cupti.CallbackDomain.DRIVER_API): _select(cupti.driver_api_trace_cbid.__members__),
            int(cupti.CallbackDomain.RUNTIME_API): _select(
                cupti.runtime_api_trace_cbid.__members__
            ),
        }
        kinds = cupti.ActivityKind
        self._kinds = ActivityKinds(
            frozenset({int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL)}),
            int(kinds.MEMCPY),
            int(kinds.MEMSET),
            int(kinds.EXTERNAL_CORRELATION),
        )
        try:
            self._subscriber = self._subscribe(cupti)
        except Exception as exc:
            self._say_not_started(cupti, exc)
            return False
        try:
            for domain, apis in self._apis.items():
                for cbid in apis:
                    cupti.enable_callback(1, self._subscriber, domain, cbid)
            # Buffers before kinds: records may be produced as soon as a kind is enabled.
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            for name in ACTIVITY_KINDS + (API_KINDS if self._external_correlation else ()):
                cupti.activity_enable(getattr(kinds, name))
                self._enabled_kinds.append(int(getattr(kinds, name)))
        except Exception as exc:
            self._say_not_started(cupti, exc)
            self._undo()
            return False
        self.started = True
        warn_once(
            "profile:python",
            "profile: collecting through CUPTI's Python binding, which adds about "
            "20-50 us of CPU time per launch; GPU times are not affected",
        )
        return True

    def stop(self) -> None:
        """Flush every buffer (records of finished work arrive now), then unsubscribe."""
        if not self.started:
            return
        self.started = False
        try:
            self._cupti.activity_flush_all(FLUSH_FORCED)
        except Exception as exc:
            report_fault("flushing CUPTI's activity buffers", exc)
        self._undo()
        if self._join.launch_count and not self._join.record_count:
            versions = ", ".join(f"{k} {v}" for k, v in binding_versions().items())
            warn_once(
                "profile:no-records",
                f"profile: CUPTI delivered no GPU records for "
                f"{self._join.launch_count} launch calls ({versions}): the binding and the "
                "CUPTI library must come from the same CUDA release (for CUDA 13.0: "
                "pip install 'cupti-python==13.0.*' 'nvidia-cuda-cupti==13.0.*')",
            )

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

    # --- CUPTI's callbacks: never raise into CUPTI -------------------------------------------

    def _on_api(self, userdata: Any, domain: int, cbid: int, data: Any) -> None:
        try:
            if data.callback_site == self._enter:
                api, graph = self._apis[domain][cbid]
                try:
                    frame = sys._getframe(1)  # the Python frame that called into the library
                except ValueError:  # a thread with no Python frame (a C++ worker thread)
                    frame = None
                self._capture.enter(
                    frame, data.correlation_id, api, graph, self._cupti.get_timestamp()
                )
            else:
                self._capture.exit(data.correlation_id, self._cupti.get_timestamp())
        except Exception as exc:
            report_fault("recording a CUDA launch for kname profile", exc)

    def _buffer_requested(self) -> tuple[int, int]:
        return self._buffer_bytes, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: list) -> None:
        try:
            work, externals = activity_records(activities, self._kinds, self._copy_kind_name)
            if externals:
                self._join.add_externals(externals)
            self._join.add_activities(work)
            if self._log is not None:
                self._log.add_activities(work)
                if externals:
                    self._log.add_externals(externals)
        except Exception as exc:
            report_fault("reading CUPTI's activity records", exc)

    # --- helpers ------------------------------------------------------------------------------

    def _copy_kind_name(self, copy_kind: int) -> str:
        name = self._copy_kinds.get(copy_kind)
        if name is None:
            try:
                name = self._cupti.ActivityMemcpyKind(copy_kind).name
            except ValueError:
                name = "UNKNOWN"
            self._copy_kinds[copy_kind] = name
        return name

    def _subscribe(self, cupti: Any) -> int:
        self._holder = None
        if not hasattr(cupti, "subscribe_v2"):
            return cupti.subscribe(self._on_api, self._userdata)
        params = cupti.SubscriberParams()
        params.struct_size = cupti.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = SUBSCRIBER_NAME
        try:
            return cupti.subscribe_v2(self._on_api, self._userdata, params.ptr)
        except Exception:
            self._holder = params.old_subscriber_name
            raise

    def _say_not_started(self, cupti: Any, exc: Exception) -> None:
        status = getattr(exc, "status", None)
        if status == int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED):
            holder = f"'{self._holder}'" if self._holder else "another tool"
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
        warn_once(
            "profile:start", f"profile: CUPTI could not be started ({reason}); {NOT_COLLECTED}"
        )

    def _undo(self) -> None:
        cupti = self._cupti
        for kind in self._enabled_kinds:
            try:
                cupti.activity_disable(kind)
            except Exception as exc:
                report_fault("disabling CUPTI activity collection", exc)
        self._enabled_kinds.clear()
        if self._subscriber is not None:
            try:
                cupti.unsubscribe(self._subscriber)
            except Exception as exc:
                report_fault("unsubscribing from CUPTI", exc)
            self._subscriber = None


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
