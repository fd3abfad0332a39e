"""The launch wrapper's contract (kname.launch): once push() is called, pop() is called exactly
once, however the wrapper is left; the launch's result and exception are unchanged.

In-process, with the site's push and pop replaced by recorders after the site is built (no NVTX
tool is attached in the test process). An exception raised by push() after it has recorded
stands for an async exception arriving as push() returns: both reach the wrapper at the same
instruction. Real signals and threads under NVTX capture: test_reliability_async.
"""

from __future__ import annotations

import gc
import sys

import pytest
from test_callsite import Sandbox
from test_callsite import sandbox as sandbox

import kname
from kname import callsite
from kname.launch import LAUNCHER, UNNAMED_IN_LAUNCHERS, LaunchSpec, Switch, make_launch_wrapper

pytestmark = pytest.mark.launches


class Interrupt(BaseException):
    """An async exception (a KeyboardInterrupt stand-in pytest does not treat specially)."""


def kernel(x):
    if x == "raise":
        raise ValueError("from the kernel")
    return x + 1


def from_one_line(launch, x):
    """Every launch of a test from this one line: one call site."""
    return launch(x)


@pytest.fixture
def recorded():
    """A wrapped `kernel`, its site built, whose push and pop append to a list."""
    events: list[str] = []
    wrapper = make_launch_wrapper(kernel, LaunchSpec("test", lambda _k: "kernel"), Switch())

    def launch(x):
        return from_one_line(wrapper, x)

    launch(0)  # the site is built here
    (site,) = [s for s in callsite.sites.values() if s.kernel == "kernel"]

    def push():
        events.append("push")
        if push.raises:
            raise push.raises

    def pop():
        events.append("pop")

    push.raises = None
    site.push, site.pop = push, pop
    return launch, push, events


def test_an_async_exception_as_push_returns_closes_the_range_and_propagates(
    recorded, capsys
) -> None:
    launch, push, events = recorded
    push.raises = Interrupt()
    with pytest.raises(Interrupt):
        launch(1)
    assert events == ["push", "pop"]
    assert capsys.readouterr().err == ""  # not a kname fault: said nothing
    push.raises = None
    assert launch(1) == 2
    assert events == ["push", "pop"] * 2  # the line is still named


def test_a_failing_push_is_said_once_and_the_launch_runs_and_the_range_closes(
    recorded, capsys
) -> None:
    launch, push, events = recorded
    push.raises = RuntimeError("push failed")
    assert launch(1) == 2
    assert events == ["push", "pop"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error while opening a launch's NVTX range" in err
    assert launch(1) == 2  # that line now runs unnamed: nothing is retried
    assert events == ["push", "pop"]


def test_the_launchs_exception_propagates_unchanged_and_the_range_closes(recorded) -> None:
    launch, _push, events = recorded
    with pytest.raises(ValueError, match="from the kernel") as raised:
        launch("raise")
    assert events == ["push", "pop"]
    assert raised.value.__context__ is None


def test_an_async_exception_while_naming_opens_no_range(capsys) -> None:
    events: list[str] = []

    def kernel_of(args):
        if args == ("interrupt",):
            raise Interrupt()
        return kernel

    wrapper = make_launch_wrapper(kernel, LaunchSpec("test", lambda _k: "k", kernel_of), Switch())

    def launch(x):
        return from_one_line(wrapper, x)

    launch(0)
    (site,) = [s for s in callsite.sites.values() if s.kernel == "k"]
    site.push, site.pop = (lambda: events.append("push")), (lambda: events.append("pop"))
    with pytest.raises(Interrupt):
        launch("interrupt")
    assert events == []
    assert capsys.readouterr().err == ""
    assert launch(1) == 2
    assert events == ["push", "pop"]


def test_a_launch_called_from_c_with_no_python_frame_runs_unnamed(capsys) -> None:
    """A thread started by C calls the wrapper with no Python frame above it (as a library's
    own worker thread may): the launch runs, unnamed and uncounted, and nothing is reported."""
    import _thread
    import threading

    ran = threading.Event()

    def recording_kernel(x):
        ran.set()
        return x

    wrapper = make_launch_wrapper(recording_kernel, LaunchSpec("test", lambda _k: "k"), Switch())
    _thread.start_new_thread(wrapper, (1,))  # the new thread calls `wrapper` straight from C
    assert ran.wait(10)
    for _ in range(500):  # an error would be printed as the thread ends
        if _thread._count() == 0:
            break
        ran.wait(0.01)
    assert capsys.readouterr().err == ""
    assert not callsite.sites  # no site was made for a launch with no caller
    assert from_one_line(wrapper, 2) == 2 and len(callsite.sites) == 1  # a Python caller: named


# --------------------------------------------------------------------------
# Launches inside a KNAME_TARGETS launcher (issue 45 item 17)
# --------------------------------------------------------------------------


def python_calls(call) -> list[str]:
    """The Python functions `call()` runs, in order."""
    names: list[str] = []

    def record(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)

    collecting = gc.isenabled()
    gc.disable()  # no gc callback (hypothesis adds one) in the record
    sys.setprofile(record)
    try:
        call()
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return names


def test_a_launch_inside_a_launcher_is_the_launchers_alone_decided_per_launch(hot_path) -> None:
    """A wrapper made with UNNAMED_IN_LAUNCHERS names its launches outside a launcher's and not
    inside; the launcher's own wrapper (LAUNCHER too) names its launch. On the C hot path the
    check is C's: a cached launch of either runs no Python code but the program's own."""
    switch = Switch()
    inner = make_launch_wrapper(
        kernel, LaunchSpec("test", lambda _k: "inner"), switch, launchers=UNNAMED_IN_LAUNCHERS
    )

    def launcher(x):
        return inner(x)  # inside the launcher: its range alone names this

    outer = make_launch_wrapper(
        launcher, LaunchSpec("test", lambda _k: "outer"), switch,
        launchers=UNNAMED_IN_LAUNCHERS | LAUNCHER,
    )  # fmt: skip

    def outside(x):
        return inner(x)  # outside any launcher: named after this line

    for _ in range(3):
        assert outside(1) == 2
        assert from_one_line(outer, 1) == 2
    counts = {name.split()[0].rsplit(".", 1)[-1]: n for name, n in kname.names().items()}
    assert counts == {"outside": 3, "from_one_line": 3}, kname.names()
    if hot_path == "native":
        assert python_calls(lambda: outside(1)) == ["<lambda>", "outside", "kernel"]
        assert python_calls(lambda: from_one_line(outer, 1)) == [
            "<lambda>", "from_one_line", "launcher", "kernel",
        ]  # fmt: skip


def test_a_user_launcher_beside_a_built_in_target_runs_no_python_check_on_the_c_path(
    sandbox: Sandbox, hot_path
) -> None:
    """The README's own example, KNAME_TARGETS=numba,mypkg.gpu:launch: the launcher's launches
    cost what they cost alone (it went through a Python check, +553 ns, where alone +30 ns)."""
    sandbox.install("numba", "fakegpu:launch")
    fakegpu = sandbox.load("fakegpu")

    def launch_from_a_line():
        return fakegpu.launch(1)

    launch_from_a_line()  # its site is made
    calls = python_calls(launch_from_a_line)
    assert calls[0] == "launch_from_a_line" and calls[-1] == "launch"
    if hot_path == "native":
        assert calls == ["launch_from_a_line", "launch"]
    assert sum(kname.names().values()) == 2
