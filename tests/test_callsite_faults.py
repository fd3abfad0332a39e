"""kname's own faults at a launch: the launch is counted, and only its own call site gives up.

In-process, through the fakegpu target (see test_callsite.Sandbox); the faults are forced by
replacing one of kname's functions for one call, as a transient failure would strike.
"""

from __future__ import annotations

import sys
import threading

import pytest
from test_callsite import Sandbox
from test_callsite import sandbox as sandbox

import kname
from kname import _locks, callsite

pytestmark = pytest.mark.launches

HELPERS = """
import fakegpu


def go(*args):
    return fakegpu.launch(*args)  # L:go
"""

APP = """
import launchers


def first(i):
    return launchers.go(i)  # L:first


def second(i):
    return launchers.go(i)  # L:second
"""


def fail_once_for(monkeypatch: pytest.MonkeyPatch, function_name: str) -> list[str]:
    """Make callsite.kind_of raise once, when it first judges code named `function_name`."""
    fired: list[str] = []
    real_kind_of = callsite.kind_of

    def kind_of(code, module):
        if code.co_name == function_name and not fired:
            fired.append(function_name)
            raise MemoryError("a transient fault")
        return real_kind_of(code, module)

    monkeypatch.setattr(callsite, "kind_of", kind_of)
    return fired


def test_a_transient_fault_through_a_skipped_helper_gives_up_on_one_caller_only(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install(skip="launchers")
    app = sandbox.load("app")
    fired = fail_once_for(monkeypatch, "first")
    for i in range(10):
        assert app.first(i) == (i,)
        assert app.second(i) == (i,)
    assert fired == ["first"]
    names = kname.names()
    # The other caller of the helper is named at every launch.
    assert names[sandbox.name("app", "L:second", "second")] == 10
    # The faulting launch is counted, with the other launches of its line.
    assert sum(names.values()) == 20
    assert sandbox.name("launchers", "L:go", "go") not in names
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("kname: internal error while"), err


def test_a_fault_before_a_launch_is_counted_counts_it(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install()
    app = sandbox.load("app")
    fired = fail_once_for(monkeypatch, "go")
    for i in range(5):
        app.first(i)
    assert fired == ["go"]
    # Line `go` runs as if kname were off from its fault on, still counted, the fault's too.
    assert sum(kname.names().values()) == 5


def test_a_fault_after_a_launch_is_counted_does_not_count_it_twice(sandbox: Sandbox) -> None:
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install(skip="launchers")
    app = sandbox.load("app")
    app.first(0)
    app.second(0)
    [site] = [s for s in callsite.sites.values() if s.name.startswith("first ")]

    def push():
        raise MemoryError("a transient fault")

    site.push = push  # the next launch from `first` is counted, then fails to open its range
    for i in range(1, 5):
        app.first(i)
        app.second(i)
    assert kname.names() == {
        sandbox.name("app", "L:first", "first"): 5,
        sandbox.name("app", "L:second", "second"): 5,
    }
    assert site.push is None  # that line gave up its ranges


DEEP = """
import fakegpu


def deep(n):
    if n <= 0:
        return fakegpu.launch(n)  # L:deep
    return deep(n - 1)
"""


def stack_depth() -> int:
    depth, frame = 0, sys._getframe(1)
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    return depth


def test_a_launch_near_the_recursion_limit_runs_and_its_line_is_named_later(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    sandbox.write("deep_app", DEEP)
    sandbox.install()
    app = sandbox.load("deep_app")
    # A first launch elsewhere: the very first one imports nvtx (and numpy), which has no place
    # near the recursion limit.
    app.fakegpu.launch("first")
    room = sys.getrecursionlimit() - stack_depth()
    ran = 0
    # From the deepest first: the first launches have no room to find their call site.
    for depth in range(room, room - 60, -1):
        try:
            app.deep(depth)
            ran += 1
        except RecursionError:
            pass  # too deep for the program itself (kname adds one wrapper frame)
    assert ran > 40
    app.deep(3)
    names = kname.names()
    # Named once there was room, and from then on: the line did not give up.
    assert names.get(sandbox.name("deep_app", "L:deep", "deep"), 0) >= 2
    # Every launch that ran is counted (one that failed to start may be counted too).
    assert ran + 2 <= sum(names.values()) <= 60 + 2
    err = capsys.readouterr().err
    assert "internal error" not in err, err
    assert len(err.splitlines()) <= 1
    assert every_kname_lock_is_free()


def every_kname_lock_is_free() -> bool:
    """Whether another thread can take each of kname's locks (none was left held)."""
    taken = []

    def take_each():
        for lock in _locks.all_locks():
            taken.append(lock.acquire(True, 5))
            if taken[-1]:
                lock.release()

    thread = threading.Thread(target=take_each)
    thread.start()
    thread.join()
    return all(taken)
