"""cupti-python's CUPTI callback: the pure-Python fallback of kname profile's callback.

cupti-python calls a Python function at each launch API call, which hands the calling frame to
LaunchCapture.enter and exit (capture.py's rules): about 20-50 us of CPU time per launch. The
activity buffers are then cupti-python's too (a Python object per record, cupti_collector.py).
It takes CUPTI's graph resource callbacks as well (`graphs`: node made, cloned, updated,
destroyed; capture.GRAPH_CALLBACKS), which tie each CUDA graph node to its line. Used where the
C callback (native_callback.py) is not: no extension, KNAME_NATIVE=0, or no libcupti it can reach.
"""

from __future__ import annotations

import sys
from typing import Any

from kname._warnings import report_fault
from kname.profiling.capture import Apis, GraphCallbacks, LaunchCapture, graph_ids

SUBSCRIBER_NAME = "kname"
PYTHON_CALLBACK_COST = "about 20-50 us of CPU time per launch"


class PythonCallbacks:
    """CUPTI's callback through cupti-python: one Python call per launch API enter and exit."""

    reads_activity_buffers = False  # cupti-python's buffers, with the collector's callbacks

    def __init__(self, capture: LaunchCapture, why: str) -> None:
        self._capture = capture
        self._why = why
        self._cupti: Any = None
        self._subscriber: int | None = None
        self._userdata: list = []  # kept alive for CUPTI's callback, as in NVIDIA's samples
        self.holder: str | None = None  # the tool holding CUPTI, when subscribing failed so

    def describe(self) -> str:
        """What collects, for the line said at start."""
        return f"CUPTI's Python binding ({self._why}), which adds {PYTHON_CALLBACK_COST}"

    def subscribe(self, cupti: Any, apis: Apis, graphs: GraphCallbacks | None = None) -> None:
        """Subscribe and enable `apis` and `graphs`; raises the binding's error (status) on
        failure."""
        self._cupti, self._apis, self._graphs = cupti, apis, graphs or {}
        self._enter = int(cupti.ApiCallbackSite.API_ENTER)
        self._resource = int(cupti.CallbackDomain.RESOURCE)
        self._subscriber = self._subscribe(cupti)
        for domain, chosen in apis.items():
            for cbid in chosen:
                cupti.enable_callback(1, self._subscriber, domain, cbid)
        for cbid in self._graphs:
            cupti.enable_callback(1, self._subscriber, self._resource, cbid)

    def unsubscribe(self) -> None:
        """No callback after this; raises the binding's error."""
        subscriber, self._subscriber = self._subscriber, None
        if subscriber is not None:
            self._cupti.unsubscribe(subscriber)

    def drain(self) -> None:
        """Nothing waits here: each call went to the capture as it was made."""

    def _subscribe(self, cupti: Any) -> int:
        self.holder = None
        if not hasattr(cupti, "subscribe_v2"):
            return cupti.subscribe(self._on_api, self._userdata)
        params = cupti.SubscriberParams()
        params.struct_size = cupti.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = SUBSCRIBER_NAME
        try:
            return cupti.subscribe_v2(self._on_api, self._userdata, params.ptr)
        except Exception as exc:
            # CUPTI names the subscriber that holds it only when one does: after any other
            # failure (no driver) the field holds whatever bytes, and reading it would raise a
            # UnicodeDecodeError in place of the error that says what is wrong.
            taken = int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
            if getattr(exc, "status", None) == taken:
                self.holder = params.old_subscriber_name
            raise

    # CUPTI's callback: never raises into CUPTI.
    def _on_api(self, userdata: Any, domain: int, cbid: int, data: Any) -> None:
        try:
            if domain == self._resource:
                self._on_graph(self._graphs[cbid], data)
            elif data.callback_site == self._enter:
                api, graph = self._apis[domain][cbid]
                try:
                    frame = sys._getframe(1)  # the Python frame that called into the library
                except ValueError:  # a thread with no Python frame (a C++ worker thread)
                    frame = None
                record = self._capture.enter(frame, data.correlation_id, api, graph, 0)
                # Timed once kname's own work is done: the call's time is the launch's.
                record.start = self._cupti.get_timestamp()
            else:
                self._capture.exit(data.correlation_id, self._cupti.get_timestamp())
        except Exception as exc:
            report_fault("recording a CUDA launch for kname profile", exc)

    def _on_graph(self, event: str, data: Any) -> None:
        """A graph resource callback: `data` is CUPTI's CUpti_ResourceData, whose descriptor is
        the CUpti_GraphData."""
        cupti = self._cupti
        if not data.resource_descriptor:
            return  # no CUpti_GraphData: nothing to tie
        graph_data = cupti.GraphData.from_ptr(data.resource_descriptor, readonly=True)
        ids = graph_ids(
            graph_data,
            cupti.get_graph_node_id,
            cupti.get_graph_id,
            getattr(cupti, "get_graph_exec_id", _no_id),  # cuptiGetGraphExecId: CUPTI 12.4+
        )
        try:
            frame = sys._getframe(2)  # the Python frame that called into the library
        except ValueError:
            frame = None
        self._capture.graph_node(frame, event, ids)


def _no_id(handle: int) -> int:
    return 0
