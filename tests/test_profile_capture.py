"""Launch capture: the call site of each launch API call, by kname's rules, from real frames.

CUPTI calls the collector's callback from inside the CUDA API call, on the launching thread;
the callback hands `sys._getframe(1)` (the Python frame that called into the library) to the
capture. `cuda_api` below does exactly that, in place of CUPTI (which needs a GPU). The user
code, the stand-in GPU library and kname's real launch wrapper are real modules and frames.
CUPTI's record objects are replaced by stand-ins with the attribute names of cupti-python's
classes (ActivityKernel10, ActivityMemcpy6, ActivityMemset4, ActivityExternalCorrelation).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
from types import SimpleNamespace

import pytest
from support import line_of

from kname import _warnings, callsite, launch, naming
from kname.census import names
from kname.config import DEFAULT_FORMAT
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
)
from kname.profiling.join import Join
from kname.profiling.records import ExternalCorrelation, StreamLog

FAKE_CUDA = '''
"""Stands in for CUPTI's callback at a CUDA API call: the frame is the caller's."""
import sys

CAPTURE = None
NEXT = [100]


def cuda_api(api="cuLaunchKernel", graph=False):
    NEXT[0] += 1
    record = CAPTURE.enter(sys._getframe(1), NEXT[0], api, graph, NEXT[0] * 10)
    CAPTURE.exit(NEXT[0], NEXT[0] * 10 + 5)
    return record
'''

GPULIB = '''
"""A GPU library with Python launch code (like numba's dispatcher), listed in KNAME_SKIP."""
from fake_cuda import cuda_api


def launch(*args):
    return helper(*args)


def helper(*args):
    return cuda_api()
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
"""


@pytest.fixture
def user(tmp_path, monkeypatch):
    """The modules above, importable, with kname's call-site rules set up as install() does."""
    for name, source in {"fake_cuda": FAKE_CUDA, "gpulib": GPULIB, "user": USER}.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(naming, "_roots", None)
    callsite.configure(("gpulib", "fake_cuda"), DEFAULT_FORMAT, 1, False)
    modules = {name: importlib.import_module(name) for name in ("fake_cuda", "gpulib", "user")}
    join = Join()
    log = StreamLog()
    modules["fake_cuda"].CAPTURE = LaunchCapture(join, log)
    yield SimpleNamespace(join=join, log=log, **modules)
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.clear()
    for name in ("fake_cuda", "gpulib", "user"):
        sys.modules.pop(name, None)


def at(marker: str, function: str) -> str:
    return f"{function} user.py:{line_of(USER, marker)}"


def test_a_launch_from_compiled_code_is_named_after_the_users_line(user):
    record = user.user.direct()
    assert record.site == at("L:direct", "direct")
    assert (record.api, record.graph, record.parent) == ("cuLaunchKernel", False, 0)
    assert record.thread == threading.get_ident() and record.end == record.start + 5


def test_library_frames_are_passed_over(user):
    assert user.user.through_library().site == at("L:library", "through_library")


def test_a_launch_inside_knames_wrapper_gets_the_wrappers_name(user):
    spec = launch.LaunchSpec("fake", lambda kernel: "k")
    wrapped = launch.make_launch_wrapper(user.gpulib.launch, spec, launch.Switch())
    record = user.user.through_wrapper(wrapped)
    assert record.site == at("L:wrapper", "through_wrapper")
    assert names() == {record.site: 1}  # the wrapper counted it under the same name


def test_profile_sites_do_not_change_the_launch_census(user):
    user.user.direct()
    user.user.twice()
    assert names() == {}


def test_the_same_line_gives_the_same_site_every_time(user):
    first, second = user.user.twice()
    assert first.site == second.site == at("L:twice", "twice")
    assert first.correlation_id != second.correlation_id


def test_depth_and_format_follow_knames_configuration(user):
    callsite.configure(("gpulib", "fake_cuda"), "{function}@{file}:{line}", 2, False)
    record = user.user.outer()
    inner, outer = line_of(USER, "L:inner"), line_of(USER, "L:outer")
    assert record.site == f"inner@user.py:{inner} < outer@user.py:{outer}"  # callers by it too


def test_a_call_nested_in_another_launch_call_shares_its_site(user):
    capture = user.fake_cuda.CAPTURE
    outer = capture.enter(sys._getframe(0), 1, "cudaLaunchKernel", False, 10)
    inner = capture.enter(None, 2, "cuLaunchKernel", False, 11)  # no walk: the outer site
    capture.exit(2, 20)
    capture.exit(1, 30)
    assert inner.site == outer.site and inner.parent == 1 and outer.parent == 0
    assert (outer.end, inner.end) == (30, 20)
    after = capture.enter(None, 3, "cuLaunchKernel", False, 40)
    assert (after.site, after.parent) == (NO_PYTHON_FRAME, 0)


def test_open_calls_are_per_thread(user):
    capture = user.fake_cuda.CAPTURE
    capture.enter(sys._getframe(0), 1, "cudaLaunchKernel", False, 10)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(capture.enter(None, 2, "x", False, 11)))
    worker.start()
    worker.join()
    assert seen[0].parent == 0 and seen[0].site == NO_PYTHON_FRAME


def test_a_naming_fault_is_said_once_and_the_call_is_recorded(user, capsys):
    capture = user.fake_cuda.CAPTURE
    records = [capture.enter(object(), 1 + i, "cuLaunchKernel", False, 1) for i in range(2)]
    for i in range(2):
        capture.exit(1 + i, 2)
    assert [r.site for r in records] == [UNNAMED, UNNAMED]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "finding the call site of a CUDA launch" in lines[0]


def test_records_go_to_the_join_and_the_log(user):
    user.user.direct()
    user.user.through_library()
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
    capture = user.fake_cuda.CAPTURE
    for i in range(MAX_OPEN_CALLS):
        capture.enter(None, 1 + i, "cuLaunchKernel", False, 1)  # no exit callbacks
    fresh = capture.enter(sys._getframe(0), 100, "cuLaunchKernel", False, 2)
    assert fresh.parent == 0 and fresh.site.startswith("test_calls_whose_exit_never_came")
    (line,) = capsys.readouterr().err.splitlines()
    assert f"more than {MAX_OPEN_CALLS} CUDA launch calls open on one thread" in line


def test_a_wrapped_sites_calls_keep_its_range_and_hand_its_site_over(user):
    capture = user.fake_cuda.CAPTURE
    calls = []
    capture.tag_with(lambda i: calls.append(("tag", i)), lambda: calls.append(("untag",)))
    site = SimpleNamespace(
        name="step app.py:3",
        push=lambda: calls.append(("push",)),
        pop=lambda: calls.append(("pop",)),
    )
    push, pop = capture.site_calls(site)
    push()
    inside = capture.enter(None, 1, "cuLaunchKernel", False, 1)  # no frame walked: the site
    capture.exit(1, 2)
    pop()
    after = capture.enter(None, 2, "cuLaunchKernel", False, 3)
    assert calls == [("push",), ("tag", 1), ("untag",), ("pop",)]
    assert (inside.site, after.site) == ("step app.py:3", NO_PYTHON_FRAME)
    assert capture.external_sites == {1: "step app.py:3"}
    assert user.join.site_of(5) is None  # the link is registered, no call is tagged yet
    push_again, _ = capture.site_calls(SimpleNamespace(name="step app.py:3", push=None, pop=None))
    push_again()
    assert calls[-1] == ("tag", 1)  # the same id for the same name


def test_a_failing_cupti_tag_is_said_once_and_the_launch_keeps_its_site(user, capsys, monkeypatch):
    monkeypatch.setattr(_warnings, "_said", set())
    capture = user.fake_cuda.CAPTURE

    def broken(*args):
        raise RuntimeError("CUPTI_ERROR_INVALID_OPERATION")

    capture.tag_with(broken, broken)
    push, pop = capture.site_calls(SimpleNamespace(name="s", push=None, pop=None))
    for number in (1, 2):
        push()
        assert capture.enter(None, number, "cuLaunchKernel", False, 1).site == "s"
        capture.exit(number, 2)
        pop()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines  # one for the tag, one for the untag, each said once
    assert "tagging a wrapped launch for CUPTI" in lines[0]
