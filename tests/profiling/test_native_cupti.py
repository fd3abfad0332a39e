"""kname._native_cupti, kname profile's CUPTI launch callback in C, without a GPU.

The Recorder's enter() and exit() call the very C functions its CUPTI callback calls (which only
unpacks CUPTI's callback data first), from real Python frames: the sites must be capture's
(site_of_frame's, for the same frames), the parents and times as given, the counts exact under
threads, and the bounds said. The CUPTI callback itself is driven through a stand-in libcupti
(tests/support/fake_cupti.c, built here with the C compiler) that calls back as CUPTI does; and
the collector, with it, drains every launch before the activity records that name it. The
behaviour shared with the Python callback is tested on both in test_profiling_capture.py.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import platform
import signal
import subprocess
import sys
import sysconfig
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import REPO, extension_inputs
from support.cupti_stand_in import (
    COMPILER,
    CONCURRENT_KERNEL,
    CUDA_GRAPH_LAUNCH,
    CUDA_LAUNCH_KERNEL,
    DRIVER,
    StandInBinding,
    build_fake_cupti,
    stand_in_library,
)

from kname import _warnings, callsite, hotpath, naming
from kname.config import DEFAULT_FORMAT
from kname.profiling import capture as capture_module
from kname.profiling import native_callback
from kname.profiling.capture import (
    MAX_OPEN_CALLS,
    NO_PYTHON_FRAME,
    UNNAMED,
    LaunchCapture,
    site_of_frame,
)
from kname.profiling.cupti_collector import CuptiCollector, choose
from kname.profiling.join import Join
from kname.profiling.native_callback import NativeCallbacks
from kname.profiling.python_callback import PythonCallbacks
from kname.profiling.records import LaunchRecord, StreamLog

native, WHY = hotpath.choose(True).cupti()
BUILDABLE = (
    platform.python_implementation() == "CPython"
    and sys.version_info >= (3, 11)
    and not sysconfig.get_config_var("Py_GIL_DISABLED")
    and sys.platform.startswith("linux")
)
APIS = [("cuLaunchKernel", False), ("cudaGraphLaunch", True)]
KERNEL, GRAPH = 0, 1

LIBRARY = '''
"""A GPU library in Python (listed in KNAME_SKIP) that reaches the CUDA API through helpers."""
import sys

from kname.profiling.capture import site_of_frame

RECORDER = None


def launch(correlation_id):
    return helper(correlation_id)


def helper(correlation_id):
    """The CUDA call: the callback's site, and the site capture gives the same frame."""
    RECORDER.enter(correlation_id, 0, correlation_id)
    RECORDER.exit(correlation_id, correlation_id + 1)
    return site_of_frame(sys._getframe(0))
'''

USER = """
import gpulib


def step(correlation_id):
    return gpulib.launch(correlation_id)  # L:step


def skipped(correlation_id):
    return gpulib.helper(correlation_id)
"""


@pytest.fixture
def rules(tmp_path, monkeypatch):
    """Call-site rules as install() sets them, with a library module and a user module."""
    if native is None:
        pytest.skip(f"no native CUPTI callback here: {WHY}")
    (tmp_path / "gpulib.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "userlib.py").write_text(textwrap.dedent(USER))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(naming, "_roots", None)
    monkeypatch.setattr(_warnings, "_said", set())
    callsite.configure(("gpulib",), DEFAULT_FORMAT, 1, False)
    for name in ("gpulib", "userlib"):  # another test's module of the same name
        monkeypatch.delitem(sys.modules, name, raising=False)
    import gpulib
    import userlib

    yield SimpleNamespace(gpulib=gpulib, userlib=userlib)
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.clear()
    for name in ("gpulib", "userlib"):
        sys.modules.pop(name, None)


def recorder(**changes):
    """A Recorder as the collector makes it, with `changes` to its arguments."""
    arguments = dict(
        apis=APIS, sites=callsite.sites, kinds=callsite._kinds, site_of_frame=site_of_frame,
        site_key=capture_module.SITE_KEY, no_frame=NO_PYTHON_FRAME, unnamed=UNNAMED,
        max_pending=100_000, max_open_calls=MAX_OPEN_CALLS,
    )  # fmt: skip
    arguments.update(changes)
    return native.Recorder(**arguments)


def drained(made) -> dict[int, LaunchRecord]:
    return {record.correlation_id: record for record in made.drain(LaunchRecord)}


def this_line(offset: int = 0) -> str:
    """kname's name for the caller's line plus `offset`."""
    facts = naming.frame_facts(sys._getframe(1))
    facts = facts._replace(line=facts.line + offset)
    return naming.display_name(DEFAULT_FORMAT, "", "", [facts])


# --------------------------------------------------------------------------
# The choice
# --------------------------------------------------------------------------


@pytest.mark.skipif(
    not (BUILDABLE and COMPILER), reason="no C compiler, or not CPython 3.11+ on Linux"
)
def test_the_native_callback_is_in_use_wherever_it_can_be_built() -> None:
    assert native is not None, WHY
    chosen = choose(LaunchCapture(Join()))
    assert type(chosen) is native_callback.NativeCallbacks
    assert chosen.describe() == "kname's native CUPTI callback (kname._native_cupti, in C)"


def test_kname_native_off_gives_the_python_callback_and_says_why(monkeypatch) -> None:
    module, why = hotpath.choose(False).cupti()
    assert module is None and why == "KNAME_NATIVE is off"
    monkeypatch.setenv("KNAME_NATIVE", "0")
    chosen = choose(LaunchCapture(Join()))
    assert type(chosen) is PythonCallbacks
    assert chosen.describe() == (
        "CUPTI's Python binding (KNAME_NATIVE is off), which adds about 20-50 us of CPU time per "
        "launch"
    )


# --------------------------------------------------------------------------
# Sites: capture's, for the same frames
# --------------------------------------------------------------------------


def test_sites_are_captures_for_the_same_frames(rules):
    made = recorder()
    rules.gpulib.RECORDER = made
    expected = {}
    for number in range(1, 7):  # a site once built, then found in C
        expected[number] = rules.userlib.step(number)  # a user line above library frames
    expected[10] = rules.userlib.skipped(10)  # called from a user function below a library one
    expected[11] = rules.gpulib.launch(11)  # called from the test: the test's line
    expected[12] = rules.gpulib.helper(12)
    records = drained(made)
    assert {number: records[number].site for number in expected} == expected
    assert expected[1].startswith("step ") and expected[11].startswith("test_sites_are_capture")


def test_a_call_site_goes_to_python_once(rules, monkeypatch):
    asked = []

    def counting(frame):
        asked.append(frame.f_code.co_name)
        return site_of_frame(frame)

    made = recorder(site_of_frame=counting)
    rules.gpulib.RECORDER = made
    for number in range(100):
        rules.userlib.step(number)
    for number in range(100, 200):
        made.enter(number, KERNEL, 0)  # straight from this line
        made.exit(number, 0)
    assert asked == ["helper", "test_a_call_site_goes_to_python_once"]
    assert len({record.site for record in drained(made).values()}) == 2


def test_a_site_rebuilt_under_new_rules_is_found_again(rules):
    made = recorder()
    names = []
    for template in ("{function}", "again {function}", "{function}"):
        callsite.configure((), template, 1, False)  # forgets every site and decision
        made.enter(1, KERNEL, 0)
        made.exit(1, 0)
        names.append(drained(made)[1].site)
    assert names == [
        "test_a_site_rebuilt_under_new_rules_is_found_again",
        "again test_a_site_rebuilt_under_new_rules_is_found_again",
        "test_a_site_rebuilt_under_new_rules_is_found_again",
    ]


def test_nested_calls_take_the_outer_site_and_name_it_as_parent(rules):
    made = recorder()
    here = this_line(+1)
    made.enter(1, GRAPH, 100)  # a runtime call...
    made.enter(2, KERNEL, 101)  # ...and the driver call it makes
    made.exit(2, 102)
    assert drained(made)[2].parent == 1  # drained while the outer one is open
    assert made.counts() == {
        "finished": 0, "open": 1, "dropped": 0, "graph_nodes": 0, "graph_nodes_dropped": 0,
    }  # fmt: skip
    made.exit(1, 103)
    (outer,) = made.drain(LaunchRecord)
    assert (outer.start, outer.end, outer.parent, outer.graph) == (100, 103, 0, True)
    assert outer.api == "cudaGraphLaunch" and outer.site == here


def test_a_wrapped_launch_gives_its_site_and_no_frame_is_read(rules):
    made = recorder()
    made.mark("step app.py:3")
    made.enter(1, KERNEL, 0)
    made.exit(1, 0)
    made.call_without_gil(2, KERNEL, 0, 0)  # torch's way: the GIL released around the launch
    made.unmark()
    here = this_line(+1)
    made.enter(3, KERNEL, 0)
    made.exit(3, 0)
    records = drained(made)
    assert [records[n].site for n in (1, 2)] == ["step app.py:3"] * 2
    assert records[3].site == here


def test_a_record_class_changed_after_its_slots_were_learned_is_called_as_a_class(rules):
    """drain() fills a plain slots class's records in place, where it learned the slots; once
    the class has changed (here its __setattr__) it builds them by calling the class again."""

    class Record(LaunchRecord):
        __slots__ = ()

    made = recorder()
    made.enter(1, KERNEL, 0)
    made.exit(1, 0)
    assert [type(r) for r in made.drain(Record)] == [Record]  # its slots learned, filled in place
    seen = []

    def __setattr__(self, name, value):
        seen.append(name)
        object.__setattr__(self, name, value)

    Record.__setattr__ = __setattr__
    made.enter(2, KERNEL, 0)
    made.exit(2, 0)
    (record,) = made.drain(Record)
    assert record.correlation_id == 2 and "correlation_id" in seen


def test_a_launch_with_the_gil_released_is_named_after_the_frame_that_made_it(rules):
    made = recorder()
    here = this_line(+1)
    made.call_without_gil(1, KERNEL, 5, 9)
    made.call_without_gil(2, KERNEL, 5, 9, True)  # a thread made in C: it never ran Python
    records = drained(made)
    assert records[1].site == here and records[1].thread == threading.get_ident()
    assert records[2].site == NO_PYTHON_FRAME and records[2].thread != threading.get_ident()
    assert (records[2].start, records[2].end) == (5, 9)


SUBINTERPRETERS = next(
    (name for name in ("_interpreters", "_xxsubinterpreters") if importlib.util.find_spec(name)),
    None,
)


@pytest.mark.skipif(native is None, reason=f"no native CUPTI callback here: {WHY}")
@pytest.mark.skipif(SUBINTERPRETERS is None, reason="no sub-interpreters")
def test_a_launch_with_the_gil_released_is_named_once_a_subinterpreter_was_made():
    # Once one is made, PyGILState_Check() says yes on every thread: the callback must still
    # take the GIL for a launch made with it released, not read a frame without it.
    script = textwrap.dedent(f"""
        import {SUBINTERPRETERS} as interpreters
        from kname import hotpath
        native, _ = hotpath.choose(True).cupti()
        made = native.Recorder(
            apis=[("cuLaunchKernel", False)], sites={{}}, kinds={{}},
            site_of_frame=lambda frame: frame.f_code.co_name, site_key="k",
            no_frame="<no frame>", unnamed="<unnamed>", max_pending=10, max_open_calls=8,
        )
        interpreters.destroy(interpreters.create())
        def launching():
            made.call_without_gil(1, 0, 5, 9)
        launching()
        print([record[2] for record in made.drain(lambda *fields: fields)], made.take_fault())
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['launching'] None"


def test_threads_each_name_their_own_launches_and_none_is_lost(rules):
    made = recorder()
    per_thread, threads = 5_000, 8
    seen: dict[int, tuple[int, str]] = {}  # thread -> (its first correlation id, its site)

    together = threading.Barrier(threads)  # all alive at once: no thread id is reused

    def work(first: int) -> None:
        seen[threading.get_ident()] = (first, this_line(+3))
        together.wait()
        for number in range(first, first + per_thread):
            made.enter(number, KERNEL, number)
            made.exit(number, number + 1)

    workers = [threading.Thread(target=work, args=(1 + i * per_thread,)) for i in range(threads)]
    records: dict[int, LaunchRecord] = {}
    for worker in workers:
        worker.start()
    while any(worker.is_alive() for worker in workers):
        records.update(drained(made))  # drains while the threads record
    records.update(drained(made))
    assert sorted(records) == list(range(1, 1 + per_thread * threads))
    assert len(seen) == threads
    for record in records.values():
        first, site = seen[record.thread]
        assert first <= record.correlation_id < first + per_thread and record.site == site
        assert (record.start, record.end) == (record.correlation_id, record.correlation_id + 1)


# --------------------------------------------------------------------------
# Bounds and faults: said once, at the drain, and the launch still recorded
# --------------------------------------------------------------------------


def collector_drain(made, capsys) -> tuple[Join, list[str]]:
    """What the collector does with the recorder's news: the records and the lines said."""
    join = Join()
    callbacks = NativeCallbacks(native, LaunchCapture(join))
    callbacks.recorder = made
    callbacks.drain()
    callbacks.drain()  # said once
    return join, capsys.readouterr().err.splitlines()


def test_calls_whose_exit_never_came_are_forgotten_and_said_once(rules, capsys):
    made = recorder()
    forgotten = this_line(+2)
    for number in range(MAX_OPEN_CALLS):
        made.enter(number, KERNEL, 1)
    fresh = this_line(+1)
    made.enter(100, KERNEL, 2)
    made.exit(100, 3)
    join, lines = collector_drain(made, capsys)
    assert join.launch_count == MAX_OPEN_CALLS + 1  # the forgotten ones kept, with no end
    assert join.site_of(100) == fresh and join.site_of(0) == forgotten
    (line,) = lines
    assert f"more than {MAX_OPEN_CALLS} CUDA launch calls open on one thread" in line


def test_past_the_bound_calls_are_dropped_and_said_once(rules, capsys, monkeypatch):
    monkeypatch.setattr(native_callback, "MAX_PENDING", 10)
    made = recorder(max_pending=10)
    for number in range(15):
        made.enter(number, KERNEL, 0)
        made.exit(number, 0)
    counts = made.counts()
    assert (counts["finished"], counts["open"], counts["dropped"]) == (10, 0, 5)
    join, lines = collector_drain(made, capsys)
    assert join.launch_count == 10
    (line,) = lines
    assert "more than 10 launch calls waited for CUPTI's activity records" in line
    made.enter(20, KERNEL, 0)  # room again after the drain
    made.exit(20, 0)
    assert list(drained(made)) == [20]


def test_a_fault_in_naming_is_said_once_and_the_launch_is_recorded(rules, capsys):
    def broken(frame):
        raise RuntimeError("naming failed")

    made = recorder(site_of_frame=broken)
    for number in range(3):
        made.enter(number, KERNEL, 0)
        made.exit(number, 0)
    join, lines = collector_drain(made, capsys)
    assert [join.site_of(n) for n in range(3)] == [UNNAMED] * 3
    (line,) = lines
    assert "internal error while finding the call site of a CUDA launch" in line
    assert "RuntimeError: naming failed" in line


def test_an_interrupt_while_naming_reaches_the_program_later(rules, request):
    def interrupted(frame):
        raise KeyboardInterrupt

    # Python's SIGINT handler, which a process started where SIGINT is ignored (a background
    # job of a shell) does not have: the interrupt is put back as a pending SIGINT.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    made = recorder(site_of_frame=interrupted)
    with pytest.raises(KeyboardInterrupt):
        made.enter(1, KERNEL, 0)  # the call is recorded, and the interrupt raised right after
        for _ in range(1_000_000):
            pass
    made.exit(1, 0)
    assert drained(made)[1].site == UNNAMED
    assert made.take_fault() is None


def test_a_bad_api_index_is_refused(rules):
    with pytest.raises(IndexError):
        recorder().enter(1, len(APIS), 0)
    with pytest.raises(ValueError, match="max_open_calls"):
        recorder(max_open_calls=native.MAX_OPEN + 1)


# --------------------------------------------------------------------------
# Memory and references: nothing kept per launch
# --------------------------------------------------------------------------


def test_a_million_launches_keep_no_reference_and_no_memory(rules):
    made = recorder()

    def launch(number: int) -> None:
        made.enter(number, KERNEL, number)
        made.exit(number, number)

    launch(0)  # the site built and kept
    name = drained(made)[0].site
    gc.collect()
    references, blocks = sys.getrefcount(name), sys.getallocatedblocks()
    for _ in range(10):
        for number in range(100_000):
            launch(number)
        records = made.drain(LaunchRecord)
        assert len(records) == 100_000 and records[-1].site is name
        del records
    gc.collect()
    assert sys.getrefcount(name) == references
    assert sys.getallocatedblocks() - blocks < 100


def test_a_wrapped_sites_c_calls_keep_no_reference_per_call(rules):
    made = recorder()
    ranges = []
    nvtx_push, nvtx_pop = (lambda: ranges.append(1)), ranges.clear
    push, pop = made.site_calls("step app.py:3", nvtx_push, nvtx_pop)
    push()
    pop()
    gc.collect()
    before = [sys.getrefcount(thing) for thing in (push, pop, nvtx_push, nvtx_pop, made)]
    blocks = sys.getallocatedblocks()
    for number in range(100_000):
        push()
        made.enter(number, KERNEL, 0)
        made.exit(number, 0)
        pop()
    records = made.drain(LaunchRecord)
    assert len(records) == 100_000 and {r.site for r in records} == {"step app.py:3"}
    del records
    gc.collect()
    after = [sys.getrefcount(thing) for thing in (push, pop, nvtx_push, nvtx_pop, made)]
    assert after == before and sys.getallocatedblocks() - blocks < 100
    with pytest.raises(TypeError):
        push(1)
    with pytest.raises(TypeError, match="nvtx_pop must be callable or None"):
        made.site_calls("s", None, 3)
    with pytest.raises(TypeError, match="a call site's name is a int"):
        made.site_calls(3, None, None)


# --------------------------------------------------------------------------
# The CUPTI callback, through a stand-in libcupti
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_libcupti(tmp_path_factory) -> Path:
    if COMPILER is None:
        pytest.skip("no C compiler")
    return build_fake_cupti(tmp_path_factory.mktemp("fake_cupti"))[0]


@pytest.fixture
def cupti_library(fake_libcupti):
    return stand_in_library(fake_libcupti)


def test_the_cupti_callback_records_enabled_launch_apis(rules, cupti_library, fake_libcupti):
    made = recorder()
    assert made.subscribe(str(fake_libcupti)) == (0, None)
    assert made.enable(DRIVER, CUDA_LAUNCH_KERNEL, KERNEL) == 0
    assert made.enable(DRIVER, CUDA_GRAPH_LAUNCH, GRAPH) == 0
    call = cupti_library.fake_callback
    here = this_line(+1)
    assert call(DRIVER, CUDA_GRAPH_LAUNCH, 0, 7) == 1  # API enter
    assert call(DRIVER, CUDA_LAUNCH_KERNEL, 0, 8) == 1  # a call inside it
    assert call(DRIVER, CUDA_LAUNCH_KERNEL, 1, 8) == 1  # API exit
    assert call(DRIVER, CUDA_GRAPH_LAUNCH, 1, 7) == 1
    assert call(DRIVER, 99, 0, 9) == 0  # not enabled: CUPTI does not call
    assert made.unsubscribe() == 0
    cupti_library.fake_stale_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, 10)  # after: ignored
    records = drained(made)
    assert sorted(records) == [7, 8]
    outer, inner = records[7], records[8]
    assert outer.site == here and (outer.api, outer.graph) == ("cudaGraphLaunch", True)
    assert (inner.site, inner.parent, inner.api) == (outer.site, 7, "cuLaunchKernel")
    assert outer.start < inner.start < inner.end < outer.end  # CUPTI's timestamps


def test_a_taken_subscriber_gives_its_status_and_holder(rules, cupti_library, fake_libcupti):
    cupti_library.fake_refuse(39, b"Nsight Systems")
    assert recorder().subscribe(str(fake_libcupti)) == (39, "Nsight Systems")
    with pytest.raises(OSError):
        recorder().subscribe(str(fake_libcupti.with_name("missing.so")))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_records_nothing_from_its_parents_subscriber(
    rules, cupti_library, fake_libcupti
):
    made = recorder()
    assert made.subscribe(str(fake_libcupti))[0] == 0 and made.enable(DRIVER, 307, KERNEL) == 0
    pid = os.fork()
    if pid == 0:  # the child: CUPTI does not follow the fork, a new recorder works
        status = 1
        try:
            cupti_library.fake_callback(DRIVER, 307, 0, 1)
            cupti_library.fake_callback(DRIVER, 307, 1, 1)
            fresh = recorder()
            fresh.enter(2, KERNEL, 0)
            fresh.exit(2, 0)
            if made.counts()["finished"] == 0 and list(drained(fresh)) == [2]:
                status = 0
        finally:
            os._exit(status)
    assert os.waitpid(pid, 0)[1] == 0
    cupti_library.fake_callback(DRIVER, 307, 0, 3)  # the parent still records
    cupti_library.fake_callback(DRIVER, 307, 1, 3)
    assert made.unsubscribe() == 0 and list(drained(made)) == [3]


def test_the_collector_drains_each_launch_before_the_records_that_name_it(
    rules, cupti_library, fake_libcupti, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: str(fake_libcupti))
    join, log = Join(), StreamLog()
    # Tagging wrapped launches keeps the Python join (untagged, the join is in C: no drain).
    collector = CuptiCollector(LaunchCapture(join, log), join, log, external_correlation=True)
    assert collector.start() and collector.totals is join
    for number in (1, 2):
        here = this_line(+1)
        cupti_library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, number)
        cupti_library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 1, number)
        cupti_library.fake_kernel(CONCURRENT_KERNEL, number, 10, 30, 7, 0, 0, 0, b"k")
    collector.stop()  # the flush hands the records over, after the launches
    profile = join.profile()
    assert {name: totals.gpu_ns for name, totals in profile.sites.items()} == {here: 40}
    assert profile.unattributed.launches == 0 and [r.correlation_id for r in log.launches] == [1, 2]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kname: profile: collecting through kname's native CUPTI callback")
    assert cupti_library.fake_callback(DRIVER, CUDA_LAUNCH_KERNEL, 0, 3) == 0  # unsubscribed


def test_a_subscriber_taken_by_another_tool_is_said_in_one_line(
    rules, cupti_library, fake_libcupti, monkeypatch, capsys
):
    cupti_library.fake_refuse(39, b"nsys")
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=StandInBinding()))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: str(fake_libcupti))
    join = Join()
    collector = CuptiCollector(LaunchCapture(join), join)
    assert collector.start() is False and not collector.started
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("kname: profile: CUPTI is already in use by 'nsys' (Nsight Systems")


def test_without_libcupti_the_python_callback_is_used_and_says_why(
    rules, monkeypatch, capsys, tmp_path
):
    binding = StandInBinding()
    subscribed = []
    binding.ApiCallbackSite = SimpleNamespace(API_ENTER=0)
    binding.subscribe = lambda callback, userdata: subscribed.append(callback) or 1
    binding.enable_callback = lambda *args: None
    binding.unsubscribe = lambda subscriber: None
    monkeypatch.setitem(sys.modules, "cupti", SimpleNamespace(cupti=binding))
    monkeypatch.setattr(native_callback, "libcupti_path", lambda: str(tmp_path / "none.so"))
    join = Join()
    collector = CuptiCollector(LaunchCapture(join), join)
    assert collector.start() and subscribed
    assert collector.activity_reader == "python" and binding.registered  # cupti-python's buffers
    assert collector.activity_counts() == {}
    collector.stop()
    (line,) = capsys.readouterr().err.splitlines()
    assert "collecting through CUPTI's Python binding (the native one: libcupti " in line
    assert "about 20-50 us of CPU time per launch" in line


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


CUPTI_SOURCES = [
    path for path in extension_inputs().get("kname._native_cupti", []) if path.suffix == ".c"
]


@pytest.mark.skipif(COMPILER is None, reason="no C compiler")
@pytest.mark.parametrize("source", CUPTI_SOURCES, ids=lambda path: path.name)
def test_each_c_file_compiles_without_warnings(tmp_path, source) -> None:
    """Every file kname._native_cupti is built from (setup.py's list; Linux only)."""
    include = sysconfig.get_paths()["include"]
    flags = sysconfig.get_config_var("CFLAGS") or ""
    # Compiled for real (-fsyntax-only says nothing of functions left unused).
    done = subprocess.run(
        [COMPILER, "-c", "-fPIC", *flags.split(), "-Wall", "-Wextra", "-Werror",
         f"-I{include}", f"-I{REPO / 'kname'}", str(source), "-o", str(tmp_path / "c.o")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_frameless_launch_is_named_by_the_namer_under_the_gil_only_while_one_is_set(rules):
    # Backward per forward line: on a thread that never ran Python (autograd's), the recorder
    # asks the namer (kname.profiling.backward.forward_named) for the pass's name, with the GIL.
    made = recorder()
    asked: list[tuple[str, bool]] = []

    def namer(name: str) -> str:
        asked.append((name, threading.current_thread() is threading.main_thread()))
        return f"{name} [backward of fwd.py:{len(asked)}]"

    made.set_frameless("train.py:9")
    made.call_without_gil(1, KERNEL, 0, 0, True)  # no namer: the pass's name, no GIL taken
    made.set_frameless_namer(namer)
    made.call_without_gil(2, KERNEL, 0, 0, True)
    made.call_without_gil(3, KERNEL, 0, 0, True)
    made.set_frameless(None)
    made.call_without_gil(4, KERNEL, 0, 0, True)  # no pass runs: not asked
    made.set_frameless("train.py:9")
    made.set_frameless_namer(None)
    made.call_without_gil(5, KERNEL, 0, 0, True)
    sites = {number: record.site for number, record in drained(made).items()}
    assert sites == {
        1: "train.py:9",
        2: "train.py:9 [backward of fwd.py:1]",
        3: "train.py:9 [backward of fwd.py:2]",
        4: NO_PYTHON_FRAME,
        5: "train.py:9",
    }
    assert asked == [("train.py:9", False), ("train.py:9", False)]


def test_a_namer_that_fails_leaves_the_passs_name_and_the_fault_kept(rules):
    made = recorder()

    def namer(name: str) -> str:
        raise RuntimeError("no node")

    made.set_frameless("train.py:9")
    made.set_frameless_namer(namer)
    made.call_without_gil(1, KERNEL, 0, 0, True)
    assert drained(made)[1].site == "train.py:9"
    where, exc = made.take_fault()
    assert "call site" in where and "no node" in str(exc)
    with pytest.raises(TypeError):
        made.set_frameless_namer(3)


# --------------------------------------------------------------------------
# The whole-program cost (issue 43): less work at each call
# --------------------------------------------------------------------------


def test_an_untimed_launch_call_is_recorded_at_its_enter_and_its_exit_adds_nothing(
    rules, cupti_library, fake_libcupti
):
    """Without a trace or the verdict no end time is read: the call goes to the buffer at its
    enter (the buffer's lock once a call, not at both ends), nested ones with their parent."""
    made = recorder()
    assert made.subscribe(str(fake_libcupti)) == (0, None)
    assert made.enable(DRIVER, CUDA_LAUNCH_KERNEL, KERNEL) == 0
    assert made.enable(DRIVER, CUDA_GRAPH_LAUNCH, GRAPH) == 0
    made.time_launches(False)
    call = cupti_library.fake_callback
    here = this_line(+1)
    assert call(DRIVER, CUDA_GRAPH_LAUNCH, 0, 7) == 1  # API enter
    assert call(DRIVER, CUDA_LAUNCH_KERNEL, 0, 8) == 1  # a call inside it
    records = drained(made)  # both exits still to come
    assert sorted(records) == [7, 8]
    assert (records[7].site, records[7].parent, records[7].graph) == (here, 0, True)
    assert (records[8].site, records[8].parent, records[8].api) == (here, 7, "cuLaunchKernel")
    assert all((r.start, r.end) == (0, 0) for r in records.values())
    assert made.counts()["open"] == 0
    assert call(DRIVER, CUDA_LAUNCH_KERNEL, 1, 8) == 1  # API exits: nothing more to record
    assert call(DRIVER, CUDA_GRAPH_LAUNCH, 1, 7) == 1
    there = this_line(+1)
    assert call(DRIVER, CUDA_LAUNCH_KERNEL, 0, 9) == 1  # the next call is outermost again
    assert call(DRIVER, CUDA_LAUNCH_KERNEL, 1, 9) == 1
    assert made.unsubscribe() == 0
    (last,) = made.drain(LaunchRecord)
    assert (last.correlation_id, last.parent, last.site) == (9, 0, there)
    assert made.counts() == {
        "finished": 0, "open": 0, "dropped": 0, "graph_nodes": 0, "graph_nodes_dropped": 0,
    }  # fmt: skip


def test_a_launch_with_the_gil_released_keeps_its_line_and_follows_a_change_of_rules(rules):
    """A launch from a GIL-released call finds the site this thread found before without the
    GIL; a change of the rules (a new generation) sends it to Python again."""
    made = recorder()
    names = []
    for template in ("{function}", "{function}", "again {function}", "again {function}"):
        callsite.configure((), template, 1, False)  # forgets every site and decision
        for number in range(3):
            made.call_without_gil(number, KERNEL, 5, 9)
        names.append({record.site for record in drained(made).values()})
    function = "test_a_launch_with_the_gil_released_keeps_its_line_and_follows_a_change_of_rules"
    assert names == [{function}, {function}, {f"again {function}"}, {f"again {function}"}]
