"""Launch capture: the call site of each launch API call, by kname's rules, from real frames.

CUPTI calls the collector's callback from inside the CUDA API call, on the launching thread.
The tests that take `user` run for both launch callbacks (cupti_collector.choose picks one):
the Python one, whose callback hands `sys._getframe(1)` (the Python frame that called into the
library) to the capture, and the native one (kname._native_cupti), which finds the running frame
itself: `fake_cuda` below calls each in place of CUPTI (which needs a GPU), the native one
through the very C functions its CUPTI callback calls. The user code, the stand-in GPU library
and kname's real launch wrapper are real modules and frames. CUPTI's record objects are replaced
by stand-ins with the attribute names of cupti-python's classes (ActivityKernel10,
ActivityMemcpy6, ActivityMemset4, ActivityExternalCorrelation).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
import weakref
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import line_of
from support.profile_streams import backward_runs, expected_totals, frameless_site

from kname import _warnings, callsite, hotpath, launch, naming
from kname.census import names
from kname.config import DEFAULT_FORMAT
from kname.profiling import backward
from kname.profiling.backward import CONCURRENT
from kname.profiling.capture import (
    MAX_OPEN_CALLS,
    NO_PYTHON_FRAME,
    UNNAMED,
    ActivityKinds,
    LaunchCapture,
    activity_records,
    copy_kind_label,
    launch_api_kind,
    select_launch_apis,
    site_of_frame,
)
from kname.profiling.join import Join
from kname.profiling.native_callback import NativeCallbacks
from kname.profiling.records import (
    ActivityRecord,
    ExternalCorrelation,
    LaunchRecord,
    StreamLog,
    Streams,
)
from kname.targets.torch import backward_scope

pytestmark = pytest.mark.launches

FAKE_CUDA = '''
"""Stands in for CUPTI at a CUDA API call, calling one launch callback: the Python one is handed
the caller's frame, the native one (NATIVE) reads the running frame (this module's, passed over
as library code)."""
import sys
import threading

CAPTURE = None  # the Python callback's capture
NATIVE = None  # or the native callback (native_callback.NativeCallbacks)
APIS = [("cuLaunchKernel", False), ("cudaLaunchKernel", False), ("cuGraphLaunch", True)]
NEXT = [100]


def enter(correlation_id, api="cuLaunchKernel", graph=False, timestamp=0):
    """A launch API call starts, made by the caller's line."""
    if NATIVE is None:
        CAPTURE.enter(sys._getframe(1), correlation_id, api, graph, timestamp)
    else:
        NATIVE.recorder.enter(correlation_id, APIS.index((api, graph)), timestamp)


def exit(correlation_id, timestamp=0):
    if NATIVE is None:
        CAPTURE.exit(correlation_id, timestamp)
    else:
        NATIVE.recorder.exit(correlation_id, timestamp)


def without_python(correlation_id, start=0, end=0):
    """A launch API call (enter and exit) on a thread with no Python frame (a C++ worker)."""
    if NATIVE is None:
        def worker():
            CAPTURE.enter(None, correlation_id, "cuLaunchKernel", False, start)
            CAPTURE.exit(correlation_id, end)
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    else:  # a thread made in C, which never ran Python
        NATIVE.recorder.call_without_gil(correlation_id, 0, start, end, True)


def cuda_api(api="cuLaunchKernel", graph=False):
    """A launch API call, enter and exit: its correlation id."""
    NEXT[0] += 1
    enter(NEXT[0], api, graph, NEXT[0] * 10)
    exit(NEXT[0], NEXT[0] * 10 + 5)
    return NEXT[0]
'''

GPULIB = '''
"""A GPU library with Python launch code (like numba's dispatcher), listed in KNAME_SKIP."""
from fake_cuda import cuda_api


def launch(*args):
    return helper(*args)


def helper(*args):
    return cuda_api()


def call(function):
    return function()  # L:gpulib-call
'''

USER = """
from fake_cuda import cuda_api
import gpulib


def direct():
    return cuda_api()  # L:direct


def through_library():
    return gpulib.launch(1)  # L:library


def through_wrapper(wrapped):
    return wrapped(2)  # L:wrapper


def outer():
    return inner()  # L:outer


def inner():
    return cuda_api()  # L:inner


def twice():
    records = []
    for _ in range(2):
        records.append(cuda_api())  # L:twice
    return records


def train(backward, step):
    return backward(step)  # L:backward
"""


SOURCES = ["python", "native"]


def user_site(name: str, push=None, pop=None) -> SimpleNamespace:
    """What capture reads of a wrapped launch's site named after a user's line (a weak reference
    to its code, of a user's function: never judged library code)."""
    code_refs = (weakref.ref(user_site.__code__),)
    return SimpleNamespace(name=name, push=push, pop=pop, code_refs=code_refs)


class User(SimpleNamespace):
    """The modules, the join and the log of one test, and the records the callback made."""

    def records(self) -> dict[int, LaunchRecord]:
        """Every launch record so far, by correlation id (the native ones drained first)."""
        if self.native is not None:
            self.native.drain()
        return {record.correlation_id: record for record in self.log.launches}

    def record(self, correlation_id: int) -> LaunchRecord:
        return self.records()[correlation_id]


@pytest.fixture(params=SOURCES)
def user(request, tmp_path, monkeypatch):
    """The modules above, importable, with kname's call-site rules set up as install() does, and
    the capture fed by the launch callback of this test (`request.param`)."""
    native = None
    if request.param == "native":
        module, why = hotpath.choose(True).cupti()
        if module is None:
            pytest.skip(f"no native CUPTI callback here: {why}")
    for name, source in {"fake_cuda": FAKE_CUDA, "gpulib": GPULIB, "user": USER}.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(naming, "_roots", None)
    callsite.configure(("gpulib", "fake_cuda"), DEFAULT_FORMAT, 1, False)
    modules = {name: importlib.import_module(name) for name in ("fake_cuda", "gpulib", "user")}
    join = Join()
    log = StreamLog()
    capture = LaunchCapture(join, log)
    modules["fake_cuda"].CAPTURE = capture
    if request.param == "native":
        native = NativeCallbacks(module, capture)
        native.make_recorder(modules["fake_cuda"].APIS)
        native.take_wrapped_sites()
        modules["fake_cuda"].NATIVE = native
    yield User(join=join, log=log, capture=capture, native=native, **modules)
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.use_site_calls(None)
    callsite.clear()
    backward.collect(None)
    backward.listen(None)
    backward.recognise_autograd_threads(lambda: False)
    for name in ("fake_cuda", "gpulib", "user"):
        sys.modules.pop(name, None)


def at(marker: str, function: str) -> str:
    return f"{function} user.py:{line_of(USER, marker)}"


def on_thread(cuda, name: str, function, *args) -> int:
    """`function(*args)` run as a new Python thread called `name` (no frame of the test's above
    it): the correlation id of the launch API call it made through `cuda`."""
    thread = threading.Thread(target=function, args=args, name=name)
    thread.start()
    thread.join()
    return cuda.NEXT[0]


def test_a_launch_from_compiled_code_is_named_after_the_users_line(user):
    record = user.record(user.user.direct())
    assert record.site == at("L:direct", "direct")
    assert (record.api, record.graph, record.parent) == ("cuLaunchKernel", False, 0)
    assert record.thread == threading.get_ident() and record.end == record.start + 5


def test_library_frames_are_passed_over(user):
    assert user.record(user.user.through_library()).site == at("L:library", "through_library")


def test_a_launch_inside_knames_wrapper_gets_the_wrappers_name(user):
    spec = launch.LaunchSpec("fake", lambda kernel: "k")
    wrapped = launch.make_launch_wrapper(user.gpulib.launch, spec, launch.Switch())
    record = user.record(user.user.through_wrapper(wrapped))
    assert record.site == at("L:wrapper", "through_wrapper")
    assert names() == {record.site: 1}  # the wrapper counted it under the same name


def test_profile_sites_do_not_change_the_launch_census(user):
    user.user.direct()
    user.user.twice()
    assert names() == {}


def test_the_same_line_gives_the_same_site_every_time(user):
    first, second = map(user.record, user.user.twice())
    assert first.site == second.site == at("L:twice", "twice")
    assert first.correlation_id != second.correlation_id


def test_depth_and_format_follow_knames_configuration(user):
    callsite.configure(("gpulib", "fake_cuda"), "{function}@{file}:{line}", 2, False)
    record = user.record(user.user.outer())
    inner, outer = line_of(USER, "L:inner"), line_of(USER, "L:outer")
    assert record.site == f"inner@user.py:{inner} < outer@user.py:{outer}"  # callers by it too


def test_a_call_nested_in_another_launch_call_shares_its_site(user):
    cuda = user.fake_cuda
    first = this_line(+1)
    cuda.enter(1, "cudaLaunchKernel", False, 10)
    cuda.enter(2, "cuLaunchKernel", False, 11)  # no walk: the outer site
    cuda.exit(2, 20)
    cuda.exit(1, 30)
    outer, inner = user.record(1), user.record(2)
    assert outer.site == first
    assert inner.site == outer.site and inner.parent == 1 and outer.parent == 0
    assert (outer.end, inner.end) == (30, 20)
    later = this_line(+1)
    cuda.enter(3, "cuLaunchKernel", False, 40)  # the outer call is over: a call of its own
    cuda.exit(3, 41)
    after = user.record(3)
    assert (after.site, after.parent) == (later, 0)


def test_open_calls_are_per_thread(user):
    user.fake_cuda.enter(1, "cudaLaunchKernel", False, 10)
    user.fake_cuda.without_python(2, 11, 12)
    other = user.record(2)
    assert other.parent == 0 and other.site == NO_PYTHON_FRAME
    assert other.thread != threading.get_ident() and (other.start, other.end) == (11, 12)


def test_a_naming_fault_is_said_once_and_the_call_is_recorded(user, capsys, monkeypatch):
    def broken(*args):
        raise RuntimeError("naming failed")

    monkeypatch.setattr(callsite, "resolve", broken)
    numbers = [user.user.direct() for _ in range(2)]
    assert [user.record(n).site for n in numbers] == [UNNAMED, UNNAMED]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "finding the call site of a CUDA launch" in lines[0]


def test_records_go_to_the_join_and_the_log(user):
    user.user.direct()
    user.user.through_library()
    user.records()
    assert user.join.launch_count == 2
    assert [r.site for r in user.log.launches] == [
        at("L:direct", "direct"),
        at("L:library", "through_library"),
    ]


@pytest.mark.parametrize(
    ("name", "kind"),
    [("cuLaunchKernel", "kernel"), ("cuLaunchKernelEx_ptsz", "kernel"),
     ("cudaLaunchKernel_v7000", "kernel"), ("cudaLaunchKernelExC_v11060", "kernel"),
     ("cuLaunchCooperativeKernelMultiDevice", "kernel"), ("cuGraphLaunch", "graph"),
     ("cudaGraphLaunch_ptsz_v10000", "graph"), ("cudaMemcpyAsync_v3020", "memcpy"),
     ("cuMemcpyHtoDAsync_v2", "memcpy"), ("cudaMemset2DAsync_v3020", "memset"),
     ("cuMemsetD32Async", "memset"), ("cuLaunchHostFunc", None),
     ("cudaLaunchHostFunc_v10000", None), ("cudaGraphAddMemsetNode_v10000", None),
     ("cuMemSetAccess", None), ("cudaMalloc_v3020", None), ("cuGraphInstantiate", None)],
)  # fmt: skip
def test_launch_apis_are_chosen_by_name(name, kind):
    assert launch_api_kind(name) == kind


def test_chosen_apis_carry_their_name_without_the_runtime_version():
    chosen = select_launch_apis(
        {"cudaLaunchKernel_v7000": 211, "cudaGraphLaunch_v10000": 311, "cudaMalloc_v3020": 20}
    )
    assert chosen == {211: ("cudaLaunchKernel", False), 311: ("cudaGraphLaunch", True)}


def test_copy_kinds_read_as_people_write_them():
    assert [copy_kind_label(k) for k in ("HTOD", "DTOH", "PTOP", "UNKNOWN")] == [
        "HtoD",
        "DtoH",
        "PtoP",
        "unknown",
    ]


def test_cupti_records_become_activity_records():
    kinds = ActivityKinds(frozenset({10, 1}), 2, 3, 39)
    common = {"start": 100, "end": 250, "stream_id": 7, "device_id": 0, "graph_id": 0}
    activities = [
        SimpleNamespace(kind=10, correlation_id=5, name="axpy", **common),
        SimpleNamespace(kind=2, correlation_id=6, copy_kind=1, **common),
        SimpleNamespace(kind=3, correlation_id=7, **dict(common, graph_id=4)),
        SimpleNamespace(kind=39, correlation_id=8, external_id=77),
        SimpleNamespace(kind=5, correlation_id=9),  # a kind kname does not read
    ]
    work, externals = activity_records(activities, kinds, {1: "HTOD"}.__getitem__)
    assert [(r.kind, r.correlation_id, r.name, r.duration, r.graph_id) for r in work] == [
        ("kernel", 5, "axpy", 150, 0),
        ("memcpy", 6, "[memcpy HtoD]", 150, 0),
        ("memset", 7, "[memset]", 150, 4),
    ]
    assert externals == [ExternalCorrelation(8, 77)]


def test_calls_whose_exit_never_came_are_forgotten_and_said_once(user, capsys, monkeypatch):
    monkeypatch.setattr(_warnings, "_said", set())
    for i in range(MAX_OPEN_CALLS):
        user.fake_cuda.enter(1 + i, "cuLaunchKernel", False, 1)  # no exit callbacks
    user.fake_cuda.enter(100, "cuLaunchKernel", False, 2)
    user.fake_cuda.exit(100, 3)
    fresh = user.record(100)
    assert fresh.parent == 0 and fresh.site.startswith("test_calls_whose_exit_never_came")
    forgotten = [user.records()[1 + i] for i in range(MAX_OPEN_CALLS)]
    assert [r.end for r in forgotten] == [0] * MAX_OPEN_CALLS  # recorded, never ended
    (line,) = capsys.readouterr().err.splitlines()
    assert f"more than {MAX_OPEN_CALLS} CUDA launch calls open on one thread" in line


def test_a_wrapped_sites_calls_keep_its_range_and_hand_its_site_over(user):
    capture = user.capture
    calls = []
    capture.tag_with(lambda i: calls.append(("tag", i)), lambda: calls.append(("untag",)))
    site = user_site(
        "step app.py:3", lambda: calls.append(("push",)), lambda: calls.append(("pop",))
    )
    push, pop = capture.site_calls(site)
    push()
    user.fake_cuda.enter(1, "cuLaunchKernel", False, 1)  # no frame walked: the site
    user.fake_cuda.exit(1, 2)
    pop()
    here = this_line(+1)
    user.fake_cuda.enter(2, "cuLaunchKernel", False, 3)  # the wrapped launch is over
    user.fake_cuda.exit(2, 4)
    assert calls == [("push",), ("tag", 1), ("untag",), ("pop",)]
    assert (user.record(1).site, user.record(2).site) == ("step app.py:3", here)
    assert capture.external_sites == {1: "step app.py:3"}
    assert user.join.site_of(5) is None  # the link is registered, no call is tagged yet
    push_again, _ = capture.site_calls(user_site("step app.py:3"))
    push_again()
    assert calls[-1] == ("tag", 1)  # the same id for the same name


def test_an_untagged_wrapped_sites_calls_keep_its_range_and_hand_its_site_over(user):
    calls = []
    site = user_site("step app.py:3", lambda: calls.append("push"), lambda: calls.append("pop"))
    push, pop = user.capture.site_calls(site)
    if user.native is not None:  # the native callback's are C callables, not closures
        assert type(push).__name__ == type(pop).__name__ == "SiteCall"
    for number in (1, 2):
        push()
        user.fake_cuda.enter(number, "cuLaunchKernel", False, 1)  # no frame walked: the site
        user.fake_cuda.exit(number, 2)
        pop()
    here = this_line(+1)
    user.fake_cuda.enter(3, "cuLaunchKernel", False, 3)  # the wrapped launch is over
    user.fake_cuda.exit(3, 4)
    assert calls == ["push", "pop"] * 2
    assert [user.record(n).site for n in (1, 2, 3)] == ["step app.py:3"] * 2 + [here]
    bare_push, bare_pop = user.capture.site_calls(user_site("s"))
    bare_push()
    user.fake_cuda.enter(4, "cuLaunchKernel", False, 5)
    user.fake_cuda.exit(4, 6)
    bare_pop()
    assert user.record(4).site == "s" and calls == ["push", "pop"] * 2


def test_an_nvtx_error_in_a_wrapped_sites_calls_reaches_the_caller(user):
    def broken():
        raise RuntimeError("nvtx failed")

    push, pop = user.capture.site_calls(user_site("s", broken, broken))
    with pytest.raises(RuntimeError, match="nvtx failed"):
        push()  # the range did not open: no site marked either
    here = this_line(+1)
    user.fake_cuda.enter(1, "cuLaunchKernel", False, 1)
    user.fake_cuda.exit(1, 2)
    good_push, _ = user.capture.site_calls(user_site("s"))
    good_push()
    with pytest.raises(RuntimeError, match="nvtx failed"):
        pop()  # the site's mark is gone all the same
    later = this_line(+1)
    user.fake_cuda.enter(2, "cuLaunchKernel", False, 3)
    user.fake_cuda.exit(2, 4)
    assert (user.record(1).site, user.record(2).site) == (here, later)


def test_a_failing_cupti_tag_is_said_once_and_the_launch_keeps_its_site(user, capsys, monkeypatch):
    monkeypatch.setattr(_warnings, "_said", set())
    capture = user.capture

    def broken(*args):
        raise RuntimeError("CUPTI_ERROR_INVALID_OPERATION")

    capture.tag_with(broken, broken)
    push, pop = capture.site_calls(user_site("s"))
    for number in (1, 2):
        push()
        user.fake_cuda.enter(number, "cuLaunchKernel", False, 1)
        user.fake_cuda.exit(number, 2)
        pop()
        assert user.record(number).site == "s"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines  # one for the tag, one for the untag, each said once
    assert "tagging a wrapped launch for CUPTI" in lines[0]


def this_line(offset: int = 0) -> str:
    """kname's name for the caller's line plus `offset`."""
    facts = naming.frame_facts(sys._getframe(1))
    facts = facts._replace(line=facts.line + offset)
    return naming.display_name(DEFAULT_FORMAT, "", "", [facts])


# --------------------------------------------------------------------------
# Backward passes: autograd's launches, named after the line that started the pass
# --------------------------------------------------------------------------


def test_a_launch_with_no_frame_is_named_after_the_backward_pass_running(user):
    """torch's autograd.backward, as the torch unit wraps it, opens the pass: a launch from a
    thread with no Python frame (autograd's) is named after the line that started the pass,
    before and after it as before."""
    backward.collect(site_of_frame)  # what a profile session does at start
    cuda = user.fake_cuda
    entry = backward_scope(lambda step: step())  # torch.autograd.backward, wrapped
    cuda.without_python(1)
    user.user.train(entry, lambda: cuda.without_python(2))
    cuda.without_python(3)
    sites = [user.record(n).site for n in (1, 2, 3)]
    assert sites == [NO_PYTHON_FRAME, at("L:backward", "train"), NO_PYTHON_FRAME]


def test_no_backward_pass_is_named_when_no_profile_collects(user):
    cuda = user.fake_cuda
    user.user.train(backward_scope(lambda step: step()), lambda: cuda.without_python(1))
    assert user.record(1).site == NO_PYTHON_FRAME and backward.frameless_name() is None


def test_library_code_on_an_autograd_thread_is_named_after_the_pass(user):
    """A launch with only library frames above it (a compiled backward) takes the pass's name
    on a thread running autograd's nodes, and its own on any other thread (a pin-memory one)."""
    backward.collect(site_of_frame)
    backward.recognise_autograd_threads(lambda: threading.current_thread().name == "autograd")
    library_site = f"launch gpulib.py:{line_of(GPULIB, 'return helper')}"

    def step():
        return [on_thread(cuda, name, user.gpulib.launch) for name in ("autograd", "pin_memory")]

    cuda = user.fake_cuda
    inside = user.user.train(backward_scope(lambda run: run()), step)
    outside = on_thread(cuda, "autograd", user.gpulib.launch)
    assert [user.record(n).site for n in inside] == [at("L:backward", "train"), library_site]
    assert user.record(outside).site == library_site


def test_a_wrapped_launch_from_library_code_on_an_autograd_thread_is_named_after_the_pass(user):
    """A launch kname wraps, called with only library frames above (Inductor's launcher through
    Triton's hooks, in a compiled backward), marks the pass's name, not its library site's."""
    backward.collect(site_of_frame)
    backward.recognise_autograd_threads(lambda: threading.current_thread().name == "autograd")
    callsite.use_site_calls(user.capture.site_calls)  # what a profile session does at start
    spec = launch.LaunchSpec("fake", lambda kernel: "k")
    wrapped = launch.make_launch_wrapper(user.fake_cuda.cuda_api, spec, launch.Switch())
    library_site = f"call gpulib.py:{line_of(GPULIB, 'L:gpulib-call')}"

    def step():
        return [on_thread(cuda, name, user.gpulib.call, wrapped) for name in ("autograd", "other")]

    cuda = user.fake_cuda
    inside = user.user.train(backward_scope(lambda run: run()), step)
    outside = on_thread(cuda, "autograd", user.gpulib.call, wrapped)
    assert [user.record(n).site for n in inside] == [at("L:backward", "train"), library_site]
    assert user.record(outside).site == library_site


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(run=backward_runs(), durations=st.lists(st.integers(0, 10**6), min_size=40, max_size=40))
def test_each_gpu_record_of_a_backward_pass_joins_the_line_running_it(user, run, durations):
    """Passes opening and closing, launches with and without a Python frame, then their GPU
    records: each goes to the pass running at its launch (the newest, marked beside another
    line's), or to its own site, or to no Python frame, as the brute-force model says."""
    join, log = Join(), StreamLog()
    capture = LaunchCapture(join, log)
    user.fake_cuda.CAPTURE = capture
    if user.native is not None:
        user.native = NativeCallbacks(user.native._module, capture)
        user.native.make_recorder(user.fake_cuda.APIS)
        user.native.take_wrapped_sites()
        user.fake_cuda.NATIVE = user.native
    lines = iter(step[1] for step in run if step[0] == "open")
    backward.collect(lambda frame: next(lines))
    running: list[tuple[str, backward.Scope]] = []
    launches, activities = [], []
    for correlation_id, (step, *detail) in enumerate(run, 1):
        if step == "open":
            running.append((detail[0], backward.enter(sys._getframe())))
        elif step == "close":
            backward.leave(running.pop(detail[0])[1])
        else:
            expected = frameless_site([line for line, _ in running], NO_PYTHON_FRAME, CONCURRENT)
            if step == "launch":
                expected = detail[0]
                push, pop = capture.site_calls(user_site(expected))
                push()
                user.fake_cuda.enter(correlation_id, "cuLaunchKernel", False, correlation_id)
                user.fake_cuda.exit(correlation_id, correlation_id)
                pop()
            else:
                user.fake_cuda.without_python(correlation_id, correlation_id, correlation_id)
            launches.append(LaunchRecord(correlation_id, 0, expected, "cuLaunchKernel"))
            start = 1000 * correlation_id
            end = start + durations[correlation_id % len(durations)]
            activities.append(ActivityRecord("kernel", correlation_id, "k", start, end, 7, 0, 0))
    for _, scope in running:
        backward.leave(scope)
    if user.native is not None:
        user.native.drain()
    join.add_activities(activities)
    stream = Streams(launches, activities)
    got = {name: {k: (t.launches, t.gpu_ns) for k, t in s.kernels.items()}
           for name, s in join.profile().sites.items()}  # fmt: skip
    assert got == expected_totals(stream)
    assert backward.frameless_name() is None  # every pass ended
