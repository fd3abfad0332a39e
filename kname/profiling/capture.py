"""The rules both CUPTI callbacks follow: the call site of each launch API call and graph node
(LaunchCapture), and the GPU records made from cupti-python's activity records.

Everything here is plain Python over plain values, so it is tested without a GPU; the CUPTI
binding (cupti_collector.py) only forwards its callbacks here.

The call site is found by kname's own rules (kname.callsite: library frames, KNAME_SKIP,
KNAME_DEPTH, KNAME_FORMAT), walking from the Python frame that was running when the library
called the CUDA API. A launch API called inside another one on the same thread (the runtime
calling the driver) gets the outer call's site without a second walk, and is linked to it, so
either correlation id finds the site. A launch from a thread with no Python frame (a C++ worker
thread, such as PyTorch's autograd engine) is named after the backward pass running, if one is
(backward.py), else NO_PYTHON_FRAME; so is one with only library frames above it on a thread
running an autograd node.

A launch kname wraps hands its site over instead (site_calls): the wrapper's push tells this
thread's launch calls their site, so no frame is walked. When the collector tags wrapped
launches (tag_with), the push also pushes the site's CUPTI external correlation id, so that its
GPU records find the site even through a launch API no callback saw.

CUDA graph nodes are reported by CUPTI's resource callbacks, on the thread that makes them
(graph_node): a node made during stream capture is made inside the captured launch call, and
takes that call's site as the call's own records do (no second walk); a node made outside any
launch call (added explicitly, cudaGraphAddKernelNode) is named after the frame running, by the
same rules. Clones, updates and destructions carry node and graph ids only.

The native callback (kname._native_cupti, used where it is built) does enter and exit in C, by
the same rules and with site_of_frame below for what its cache does not answer; the push then
marks the site in C (mark_wrapped_with: with no external tagging, push and pop are themselves C
callables), and its records come here through add().
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any, NamedTuple

from kname import callsite, hotpath
from kname._locks import new_lock
from kname._warnings import report_fault, warn_once
from kname.profiling import backward
from kname.profiling.join import Join
from kname.profiling.records import (
    EXEC_DESTROYED,
    GRAPH_DESTROYED,
    KERNEL,
    MEMCPY,
    MEMSET,
    NODE_CLONED,
    NODE_CREATED,
    NODE_DESTROYED,
    NODE_UPDATED,
    ActivityRecord,
    ExternalCorrelation,
    GraphNodeRecord,
    LaunchRecord,
    StreamLog,
)
from kname.walk import LIBRARY, PLUMBING, USER

NO_PYTHON_FRAME = "<no Python frame>"
MAX_OPEN_CALLS = 8  # launch API calls open at once on one thread; more means an exit was missed
UNNAMED = "<unnamed: kname error>"
MEMSET_NAME = "[memset]"  # kname._native_cupti names a memset so too
GRAPH = "graph"
# The kernel part of the call-site cache key for sites found at the CUDA API: apart from the
# keys of kname's launch wrappers (which use id(kernel)), and the same for every API call.
SITE_KEY = "kname.profile"
_KEPT = object()  # what a profile site keeps alive in place of a kernel object

_RUNTIME_VERSION = re.compile(r"_v\d{4,5}$")
# CUPTI's resource callbacks kname profile subscribes to (CUpti_CallbackIdResource, by the
# binding's names) and the graph node record each becomes. GRAPH_NODE_UPDATED is CUPTI 13.0's.
GRAPH_CALLBACKS = {
    "GRAPHNODE_CREATED": NODE_CREATED,
    "GRAPHNODE_CLONED": NODE_CLONED,
    "GRAPH_NODE_UPDATED": NODE_UPDATED,
    "GRAPHNODE_DESTROY_STARTING": NODE_DESTROYED,
    "GRAPH_DESTROY_STARTING": GRAPH_DESTROYED,
    "GRAPHEXEC_DESTROY_STARTING": EXEC_DESTROYED,
}


# {CUPTI callback domain: {callback id: (API name, is a graph launch)}} (select_launch_apis)
Apis = dict[int, dict[int, tuple[str, bool]]]
# {CUPTI resource callback id: graph node event} (select_graph_callbacks)
GraphCallbacks = dict[int, str]


def say_open_calls_forgotten() -> None:
    """Said once: a thread had more than MAX_OPEN_CALLS launch API calls open at once."""
    warn_once(
        "profile:open-calls",
        f"profile: more than {MAX_OPEN_CALLS} CUDA launch calls open on one thread; "
        "forgetting them (a call's exit was not seen)",
    )


class ActivityKinds(NamedTuple):
    """CUPTI's activity kind numbers that the conversion reads (from cupti.ActivityKind)."""

    kernels: frozenset[int]  # CONCURRENT_KERNEL and KERNEL
    memcpy: int
    memset: int
    external_correlation: int


def launch_api_kind(name: str) -> str | None:
    """What a CUDA API function named `name` launches: kernel, graph, memcpy, memset, or None."""
    if name.startswith(("cuLaunch", "cudaLaunch")):
        return None if "HostFunc" in name else KERNEL
    if name.startswith(("cuGraphLaunch", "cudaGraphLaunch")):
        return GRAPH
    if name.startswith(("cuMemcpy", "cudaMemcpy", "cu64Memcpy")):
        return MEMCPY
    if name.startswith(("cuMemset", "cudaMemset", "cu64Memset")):
        return MEMSET
    return None


def select_launch_apis(callback_ids: Mapping[str, int]) -> dict[int, tuple[str, bool]]:
    """{callback id: (API name, is a graph launch)} for the launch APIs of one CUPTI domain.

    `callback_ids` maps CUPTI's names (`cuLaunchKernel`, `cudaLaunchKernel_v7000`) to ids; the
    runtime's version suffix is dropped from the name shown.
    """
    chosen = {}
    for name, cbid in callback_ids.items():
        kind = launch_api_kind(name)
        if kind is not None:
            chosen[int(cbid)] = (_RUNTIME_VERSION.sub("", name), kind == GRAPH)
    return chosen


def select_graph_callbacks(callback_ids: Mapping[str, int]) -> dict[int, str]:
    """{callback id: graph node event} for the graph resource callbacks this CUPTI has."""
    return {
        int(callback_ids[name]): event
        for name, event in GRAPH_CALLBACKS.items()
        if name in callback_ids
    }


class GraphIds(NamedTuple):
    """The CUPTI ids a graph resource callback is about (0 where its handle is null)."""

    node: int
    graph: int
    graph_exec: int
    original: int


def graph_ids(data: Any, node_id: Callable, graph_id: Callable, exec_id: Callable) -> GraphIds:
    """The ids of CUPTI's CUpti_GraphData `data` (handles as ints: node, graph, graph_exec,
    original_node), through cuptiGetGraphNodeId, cuptiGetGraphId and cuptiGetGraphExecId."""

    def id_of(handle: int, get: Callable) -> int:
        return int(get(handle)) if handle else 0

    return GraphIds(
        id_of(data.node, node_id),
        id_of(data.graph, graph_id),
        id_of(data.graph_exec, exec_id),
        id_of(data.original_node, node_id),
    )


def copy_kind_label(enum_name: str) -> str:
    """CUPTI's memcpy kind name as people write it: `HTOD` -> `HtoD`, `PTOP` -> `PtoP`."""
    if len(enum_name) == 4 and enum_name[1:3] == "TO":
        return f"{enum_name[0]}to{enum_name[3]}"
    return enum_name.lower()


def memcpy_work_name(enum_name: str) -> str:
    """What a copy of CUPTI's memcpy kind `enum_name` is called in a profile: `[memcpy HtoD]`."""
    return f"[memcpy {copy_kind_label(enum_name)}]"


def activity_records(
    activities: Iterable[Any], kinds: ActivityKinds, copy_kind_name: Callable[[int], str]
) -> tuple[list[ActivityRecord], list[ExternalCorrelation]]:
    """Copy what the join needs out of CUPTI's activity objects (valid only in the callback).

    Other kinds of record are passed over. `copy_kind_name(n)` names memcpy kind n (`HTOD`).
    """
    work: list[ActivityRecord] = []
    externals: list[ExternalCorrelation] = []
    for activity in activities:
        kind = activity.kind
        if kind in kinds.kernels:
            name, category = activity.name, KERNEL
        elif kind == kinds.memcpy:
            name, category = memcpy_work_name(copy_kind_name(activity.copy_kind)), MEMCPY
        elif kind == kinds.memset:
            name, category = MEMSET_NAME, MEMSET
        elif kind == kinds.external_correlation:
            externals.append(ExternalCorrelation(activity.correlation_id, activity.external_id))
            continue
        else:
            continue
        work.append(
            ActivityRecord(
                category,
                activity.correlation_id,
                name if isinstance(name, str) else str(name),
                activity.start,
                activity.end,
                activity.stream_id,
                activity.device_id,
                activity.graph_id,
                getattr(activity, "graph_node_id", 0),
            )
        )
    return work, externals


class LaunchCapture:
    """Launch API enter/exit -> launch records in the join (and the log, when one is kept)."""

    def __init__(self, join: Join, log: StreamLog | None = None) -> None:
        self._join = join
        self._log = log
        # Per thread: the launch API calls now open, and the site of the wrapped launch running.
        self._local = threading.local()
        self._external: tuple[Callable[[int], Any], Callable[[], Any]] | None = None
        self._marks: tuple[Callable[[str], Any], Callable[[], Any]] | None = None
        self._native_site_calls: Callable[[str, Any, Any], tuple[Any, Any]] | None = None
        self._external_ids: dict[str, int] = {}
        self.external_sites: dict[int, str] = {}  # external correlation id -> site name
        self._ids_lock = new_lock()  # a kname lock: a forked child gets it free
        # The correlation id of the last launch call entered (any thread): orders graph node
        # records among launches (a node updated applies to the replays launched after it).
        self._last_correlation_id = 0

    def tag_with(self, push_external: Callable[[int], Any], pop_external: Callable[[], Any]):
        """CUPTI's push and pop of an external correlation id, for the sites built from now on."""
        self._external = (push_external, pop_external)

    def mark_wrapped_with(
        self,
        mark: Callable[[str], Any],
        unmark: Callable[[], Any],
        site_calls: Callable[[str, Any, Any], tuple[Any, Any]] | None = None,
    ) -> None:
        """For the sites built from now on, the push says the site by mark(name) and the pop
        ends it by unmark(), in place of this capture's thread-local (the native callback's).
        `site_calls(name, nvtx_push, nvtx_pop)`, when given, makes both calls at once (in C),
        for the sites whose launches are not tagged with external correlation ids."""
        self._marks = (mark, unmark)
        self._native_site_calls = site_calls

    def site_calls(self, site: callsite.Site) -> tuple[Any, Any]:
        """Push and pop for the launches kname wraps at `site`: its NVTX range as before, and its
        site handed to the launch calls inside (see the module's docstring). Never raises."""
        try:
            return self._site_calls(site.name, site.push, site.pop, not names_user_line(site))
        except Exception as exc:
            report_fault("preparing a wrapped launch for kname profile", exc)
            return site.push, site.pop

    def _site_calls(
        self, name: str, nvtx_push: Any, nvtx_pop: Any, library_code: bool = False
    ) -> tuple[Any, Any]:
        push_external, pop_external = self._external or (None, None)
        # A site with no user line is named at each launch (the C calls have one fixed name):
        # on autograd's threads during a backward pass, it is the pass's.
        if self._native_site_calls is not None and push_external is None and not library_code:
            return self._native_site_calls(name, nvtx_push, nvtx_pop)
        local = self._local
        mark, unmark = self._marks or (None, None)
        external_id = self._external_id(name) if push_external is not None else 0
        name_of = backward.library_code_name if library_code else None

        # A fault in CUPTI is said once and the launch goes on: the callback still has the site.
        def push() -> None:
            if nvtx_push is not None:
                nvtx_push()
            named = name if name_of is None else name_of(name)
            if mark is None:
                local.wrapped = named
            else:
                mark(named)
            if push_external is not None:
                try:
                    push_external(external_id)
                except Exception as exc:
                    report_fault("tagging a wrapped launch for CUPTI", exc)

        def pop() -> None:
            if unmark is None:
                local.wrapped = None
            else:
                unmark()
            if pop_external is not None:
                try:
                    pop_external()
                except Exception as exc:
                    report_fault("untagging a wrapped launch for CUPTI", exc)
            if nvtx_pop is not None:
                nvtx_pop()

        return push, pop

    def _external_id(self, name: str) -> int:
        """The external correlation id of a site name, made on first use (ids from 1)."""
        with self._ids_lock:
            external_id = self._external_ids.get(name)
            if external_id is None:
                external_id = self._external_ids[name] = len(self._external_ids) + 1
                self.external_sites[external_id] = name
        self._join.add_externals((), {external_id: name})
        return external_id

    def enter(
        self,
        frame: FrameType | None,
        correlation_id: int,
        api: str,
        graph: bool,
        timestamp: int,
    ) -> LaunchRecord:
        """A launch API call starts on this thread; `frame` is the Python frame running it."""
        local = self._local
        try:
            open_calls = local.open_calls
        except AttributeError:
            open_calls = local.open_calls = []
        if len(open_calls) >= MAX_OPEN_CALLS:
            # An exit callback never came: no stale outer call may name later launches.
            say_open_calls_forgotten()
            open_calls.clear()
        if open_calls:
            outer = open_calls[-1]
            site, parent = outer.site, outer.correlation_id
        else:
            # Inside a launch kname wraps, the wrapper's push said the site: no walk.
            site, parent = getattr(local, "wrapped", None) or site_of_frame(frame), 0
        record = LaunchRecord(
            correlation_id, threading.get_ident(), site, api, timestamp, 0, graph, parent
        )
        open_calls.append(record)
        self._last_correlation_id = correlation_id
        self._join.add_launch(record)
        if self._log is not None:
            self._log.launch(record)
        return record

    def graph_node(self, frame: FrameType | None, event: str, ids: GraphIds) -> GraphNodeRecord:
        """A graph resource callback on this thread; `frame` is the Python frame running."""
        site = ""
        if event == NODE_CREATED:
            # Made during stream capture: inside the launch call captured, which has its site.
            open_calls = getattr(self._local, "open_calls", None)
            if open_calls:
                site = open_calls[-1].site
            else:
                site = getattr(self._local, "wrapped", None) or site_of_frame(frame)
        record = GraphNodeRecord(
            event, ids.node, ids.graph, ids.graph_exec, ids.original, site,
            self._last_correlation_id,
        )  # fmt: skip
        self.add_graph_nodes((record,))
        return record

    def add_graph_nodes(self, records: Iterable[GraphNodeRecord]) -> None:
        """Graph node records (made here, or by the native callback) into the join and the log."""
        join, log = self._join, self._log
        for record in records:
            join.add_graph_node(record)
            if log is not None:
                log.graph_node(record)

    def add(self, records: Iterable[LaunchRecord]) -> None:
        """Launch records made elsewhere (by the native callback) into the join and the log."""
        join, log = self._join, self._log
        for record in records:
            join.add_launch(record)
            if log is not None:
                log.launch(record)

    def exit(self, correlation_id: int, timestamp: int) -> None:
        """The launch API call with this correlation id returns on this thread."""
        open_calls = getattr(self._local, "open_calls", None)
        if not open_calls:
            return
        for index in range(len(open_calls) - 1, -1, -1):
            if open_calls[index].correlation_id == correlation_id:
                open_calls.pop(index).end = timestamp
                return


def site_of_frame(frame: FrameType | None) -> str:
    """The call-site name, by kname's rules, of a launch made while `frame` was running (None:
    a thread with no Python frame)."""
    if frame is None:
        return backward.frameless_site() or NO_PYTHON_FRAME
    try:
        # The cheap case first, as in kname's launch wrapper: a site already found from here.
        name = cached_site(frame)
        if name is not None:
            return name
        site = callsite.resolve(frame, _KEPT, SITE_KEY, "", "")
        while site is None:
            # Inside one of kname's launch wrappers, which names its launch after its caller:
            # do the same.
            frame = _caller_of_wrapper(frame)
            if frame is None:
                return backward.frameless_site() or NO_PYTHON_FRAME
            site = callsite.resolve(frame, _KEPT, SITE_KEY, "", "")
        if backward.frameless_name() is not None and not names_user_line(site):
            return backward.library_code_name(site.name)
        return site.name
    except Exception as exc:  # a naming fault must not reach the CUDA call
        report_fault("finding the call site of a CUDA launch", exc)
        return UNNAMED


PASSED_OVER = (LIBRARY, PLUMBING)
MAX_WALK = 64  # frames the cached look-up passes before leaving the search to resolve()


def cached_site(frame: FrameType) -> str | None:
    """The cached site of `frame`, found as the native recorder finds a launch's (callback.c's
    cached_site): the frame's own key, or, from library code, the first user frame's above;
    None where kname's rules must decide. Launches and allocations are mostly made deep in a
    library (torch.nn's modules): this passes the library frames without a full walk each time."""
    sites, kinds = callsite.sites, callsite._kinds
    site = sites.get((id(frame.f_code), frame.f_lasti, SITE_KEY))
    if site is not None:
        return site.name
    if kinds.get(id(frame.f_code)) not in PASSED_OVER:
        return None
    above = frame.f_back
    for _ in range(MAX_WALK):
        if above is None:
            return None
        kind = kinds.get(id(above.f_code))
        if kind == USER:
            site = sites.get((id(above.f_code), above.f_lasti, SITE_KEY))
            return None if site is None else site.name
        if kind not in PASSED_OVER:
            return None
        above = above.f_back
    return None


def names_user_line(site: callsite.Site) -> bool:
    """Whether `site` is named after a user's line (not a library frame, nor the kernel alone).

    Read from callsite's decision on the code naming it, made while the site was built (a
    decision forgotten since counts as the user's: the site is then named as before).
    """
    passed_over = (callsite.LIBRARY, callsite.COMPILE)
    if not site.code_refs:
        return False
    code = site.code_refs[0]()  # None once freed: its decision is forgotten too
    return code is None or callsite._kinds.get(id(code)) not in passed_over


def _caller_of_wrapper(frame: FrameType | None) -> FrameType | None:
    wrappers = callsite._wrapper_code_ids  # read-only use of kname's own registry
    is_native_caller = hotpath.current().is_launch_caller  # the C wrapper has no frame
    while frame is not None and id(frame.f_code) not in wrappers:
        if is_native_caller is not None and is_native_caller(frame):
            return frame  # the caller of a C wrapper's launch
        frame = frame.f_back
    return None if frame is None else frame.f_back
