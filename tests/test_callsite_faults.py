"""kname's own faults at a launch: the launch is counted, and only its own call site gives up;
and exceptions raised into a launch from outside, which are not kname's: they reach the caller.

In-process, through the fakegpu target (see test_callsite.Sandbox). kname's faults are forced
by replacing one of kname's functions for some code: they recur, as a fault of kname's own does
(one that does not recur is taken for an exception from outside). Those are raised by real
signal handlers and sent from real threads.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import itertools
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType

import pytest
from test_callsite import Sandbox
from test_callsite import sandbox as sandbox

import kname
from kname import _locks, callsite, cells, naming, paths, ranges
from kname.launch import LaunchSpec, Switch, make_launch_wrapper

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


def on_judging(monkeypatch: pytest.MonkeyPatch, hook: Callable[[CodeType], None]) -> None:
    """Run `hook(code)` as kname judges the code of a line it names: in callsite.kind_of, and in
    NativeMiss.build, where the C wrapper names a miss itself (it judges user code in C)."""
    real_kind_of, real_build = callsite.kind_of, callsite.NativeMiss.build

    def kind_of(code, module):
        hook(code)
        return real_kind_of(code, module)

    def build(self, code, *args):
        hook(code)
        return real_build(self, code, *args)

    monkeypatch.setattr(callsite, "kind_of", kind_of)
    monkeypatch.setattr(callsite.NativeMiss, "build", build)


def fail_for(monkeypatch: pytest.MonkeyPatch, function_name: str, times: int = -1) -> list[str]:
    """Make kname's judging of code named `function_name` raise (on_judging) every time (the
    first `times` times only, if given)."""
    fired: list[str] = []

    def fail(code):
        if code.co_name == function_name and len(fired) != times:
            fired.append(function_name)
            raise MemoryError("a fault of kname's")

    on_judging(monkeypatch, fail)
    return fired


def test_a_fault_through_a_skipped_helper_gives_up_on_one_caller_only(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install(skip="launchers")
    app = sandbox.load("app")
    fired = fail_for(monkeypatch, "first")
    for i in range(10):
        assert app.first(i) == (i,)
        assert app.second(i) == (i,)
    assert fired
    names = kname.names()
    # The other caller of the helper is named at every launch.
    assert names[sandbox.name("app", "L:second", "second")] == 10
    # The faulting launches are counted, with the other launches of their line.
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
    fired = fail_for(monkeypatch, "go")
    for i in range(5):
        app.first(i)
    assert fired == ["go", "go"]  # the first launch's, and its step taken again
    # Line `go` runs as if kname were off from its fault on, still counted, the fault's too.
    assert sum(kname.names().values()) == 5


def test_a_fault_that_does_not_recur_is_not_kname_s_it_reaches_the_caller_and_costs_no_name(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken once more, finding the site succeeds: what was raised came from outside. It reaches
    the caller, before the launch; the site was cached meanwhile, under its own name."""
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install()
    app = sandbox.load("app")
    fired = fail_for(monkeypatch, "go", times=1)
    with pytest.raises(MemoryError, match="a fault of kname's"):
        app.first(0)
    assert fired == ["go"]
    assert [app.first(i) for i in range(1, 5)] == [(i,) for i in range(1, 5)]
    assert kname.names() == {sandbox.name("launchers", "L:go", "go"): 4}
    assert capsys.readouterr().err == ""


def test_a_fault_after_a_launch_is_counted_does_not_count_it_twice(sandbox: Sandbox) -> None:
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install(skip="launchers")
    app = sandbox.load("app")
    app.first(0)
    app.second(0)
    [site] = [s for s in callsite.sites.values() if s.name.startswith("first ")]

    def push():
        raise MemoryError("a fault of kname's")

    # The next launch from `first` is counted, then fails to open its range.
    site.push, site.pop = push, lambda: None
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


# --------------------------------------------------------------------------
# Exceptions raised into a launch from outside are not kname's (issue 32 item 1)
# --------------------------------------------------------------------------

ONE_LINE = """
import fakegpu


def one_line(i):
    return fakegpu.launch(i)  # L:one
"""

ROUNDS = 300
WAIT = 2.0  # seconds a round waits for its exception: past that, kname swallowed it


class OneRaisePerRound:
    """Makes exactly one TimeoutError arrive from outside during each round, at a random point:
    from a signal handler (SIGALRM, a one-shot timer), or from another thread
    (PyThreadState_SetAsyncExc, as func_timeout and stopit send theirs)."""

    def __init__(self, source: str) -> None:
        self.source, self.sent, self.random = source, 0, random.Random(32)

    def __enter__(self) -> OneRaisePerRound:
        # No collection meanwhile: its callbacks (hypothesis adds one to gc.callbacks) and the
        # finalizers of cyclic garbage are Python code where an exception from outside is only
        # printed, kname or not.
        self.collecting = gc.isenabled()
        gc.disable()
        if self.source == "signal handler":
            self.previous = signal.signal(signal.SIGALRM, self._on_alarm)
        else:
            self.switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(1e-6)  # the sender runs soon after it is woken
            self.main, self.go, self.stop = threading.get_ident(), threading.Lock(), False
            self.go.acquire()
            self.sender = threading.Thread(target=self._send_each_round)
            self.sender.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.source == "signal handler":
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        else:
            self.stop = True
            self.go.release()
            self.sender.join()
            sys.setswitchinterval(self.switch_interval)
        if self.collecting:
            gc.enable()

    def arm(self) -> None:
        """The round's exception is on its way."""
        if self.source == "signal handler":
            signal.setitimer(signal.ITIMER_REAL, self.random.uniform(1e-6, 1e-4))
        else:
            self.go.release()  # a C lock: no bytecode of the main thread's runs while it is held

    def _on_alarm(self, signum, frame):
        self.sent += 1
        raise TimeoutError("from a signal handler")

    def _send_each_round(self) -> None:
        set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
        set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
        while True:
            self.go.acquire()
            if self.stop:
                return
            time.sleep(self.random.uniform(0, 1e-4))
            self.sent += set_async_exc(self.main, TimeoutError)


def interrupted_rounds(raises: OneRaisePerRound, body: Callable[[int], object]) -> int:
    """Run body(n) for ROUNDS rounds, each with one exception from outside on its way; a round
    waits for it after its body. How many rounds caught theirs (up to the first that did not)."""
    caught = 0
    for n in range(ROUNDS):
        try:
            raises.arm()
            body(n)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                pass
            return caught  # the exception never came: swallowed on the way
        except TimeoutError:
            caught += 1
    return caught


SOURCES = ["signal handler", "another thread"]


@pytest.mark.parametrize("source", SOURCES)
def test_an_exception_from_outside_reaches_each_new_line_and_costs_it_no_name(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    """A new call site per round: the exception lands anywhere in the first launch's naming."""
    sandbox.install()
    fakegpu = sandbox.load("fakegpu")
    codes = [compile(f"fakegpu.launch({n})", f"new{n}.py", "exec") for n in range(ROUNDS)]
    with OneRaisePerRound(source) as raises:
        caught = interrupted_rounds(raises, lambda n: exec(codes[n], {"fakegpu": fakegpu}))
    assert caught == raises.sent == ROUNDS
    for code in codes:  # each line again, now uninterrupted: named after itself
        exec(code, {"fakegpu": fakegpu})
    names = kname.names()
    assert set(names) == {f"<module> new{n}.py:1" for n in range(ROUNDS)}
    assert set(names.values()) <= {1, 2}  # one interrupted before it was counted, or after
    assert capsys.readouterr().err == ""  # none of them was taken for a fault of kname's


@pytest.mark.parametrize("source", SOURCES)
def test_an_exception_from_outside_reaches_a_line_launching_again_and_again_and_it_keeps_its_range(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str], source: str
) -> None:
    """From one line: the exception lands anywhere in a cached launch (on the Python path, in
    its wrapper; the C one runs no Python code there). The site's range stands for NVTX's, a
    call into C bound to its arguments."""
    sandbox.write("one", ONE_LINE)
    sandbox.install()
    app = sandbox.load("one")
    app.one_line(-1)
    (site,) = callsite.sites.values()
    pushes: list[int] = []
    pops: list[int] = []
    push, pop = functools.partial(pushes.append, 1), functools.partial(pops.append, 1)
    site.push, site.pop = push, pop

    def launch_until_interrupted(n: int) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            app.one_line(n)

    with OneRaisePerRound(source) as raises:
        caught = interrupted_rounds(raises, launch_until_interrupted)
    assert caught == raises.sent == ROUNDS
    assert list(kname.names()) == [sandbox.name("one", "L:one", "one_line")]
    assert (site.push, site.pop) == (push, pop)  # the line was not given up
    assert len(pushes) == len(pops)  # every range opened was closed
    assert capsys.readouterr().err == ""


def test_a_signal_handlers_exception_is_not_kname_s_though_raised_alike_when_taken_again(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A handler that raises each time kname judges a line's code (its signal sent from there):
    taken once more, finding the site fails alike, yet the handler's frame on the traceback
    says whose exception it is."""
    sandbox.write("launchers", HELPERS)
    sandbox.write("app", APP)
    sandbox.install()
    app = sandbox.load("app")
    armed = [True]

    def judge(code):
        if code.co_name == "go" and armed[0]:
            signal.raise_signal(signal.SIGUSR1)  # its handler runs before this returns

    def on_signal(signum, frame):
        raise TimeoutError("from a signal handler")

    on_judging(monkeypatch, judge)
    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        with pytest.raises(TimeoutError, match="from a signal handler"):
            app.first(0)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        armed[0] = False
    assert app.first(1) == (1,)
    assert kname.names() == {sandbox.name("launchers", "L:go", "go"): 1}
    assert capsys.readouterr().err == ""


def test_a_kernel_name_that_always_raises_is_kname_s_fault_said_once_and_launches_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fault of kname's own (here, of the target's kernel_name) recurs: it is swallowed, said
    once, and the launches run, unnamed."""

    def kernel_name(kernel):
        raise LookupError("no name for this kernel")

    wrapper = make_launch_wrapper(lambda x: x + 1, LaunchSpec("test", kernel_name), Switch())

    def first(x):
        return wrapper(x)

    def second(x):
        return wrapper(x)

    assert [first(i) + second(i) for i in range(10)] == [2 * i + 2 for i in range(10)]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "internal error while finding a launch's name" in err[0], err
    assert "LookupError: no name for this kernel" in err[0]
    assert kname.names() == {callsite.UNNAMED: 20}


# --------------------------------------------------------------------------
# Naming makes progress under interruptions (issue 45 item 18)
# --------------------------------------------------------------------------

# The naming core's own steps: what naming a new line computes (its kind aside, decided by
# callsite), and what an interruption must not make it compute again.
NAMING_FILES = {module.__file__ for module in (naming, paths, cells, ranges)}


class NamingSteps:
    """Counts the calls into the naming core (sys.settrace: a profile function may be set too)."""

    def __init__(self) -> None:
        self.calls = 0

    def __enter__(self) -> NamingSteps:
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc_info) -> None:
        sys.settrace(None)

    def _trace(self, frame, event, arg):
        self.calls += frame.f_code.co_filename in NAMING_FILES


ROOTS = [f"/roots/root{n}" for n in range(100)]  # path roots: sys.path entries, made absolute


def interrupt_at(call: int) -> None:
    """A real signal handler raises TimeoutError at the `call`-th Python call from now, as a
    timer's would (sys.setprofile: the profile function is removed once the handler raised)."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"
        if calls == call:
            signal.raise_signal(signal.SIGUSR1)  # handled at once, in this function

    sys.setprofile(count)


def launch_new_line(fakegpu, code, interrupted_at: int = 0) -> bool:
    """Launch from `code` (interrupted at the `interrupted_at`-th Python call, if given); whether
    the launch ran (False: a TimeoutError reached the program)."""
    try:
        if interrupted_at:
            interrupt_at(interrupted_at)
        exec(code, {"fakegpu": fakegpu})
        return True
    except TimeoutError:
        return False
    finally:
        sys.setprofile(None)


def test_an_interrupted_naming_is_resumed_not_begun_again_at_any_step(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    """Interrupted at each Python call of a new line's first launch in turn, a TimeoutError
    reaches the program, and the launch taken again completes: between them they run the
    naming core's steps about once (what was computed survives the interruption), not twice."""
    sandbox.monkeypatch.setattr(sys, "path", [*sys.path, *ROOTS])  # a step of 100 parts
    sandbox.install()
    fakegpu = sandbox.load("fakegpu")

    def on_signal(signum, frame):
        raise TimeoutError("a timer's deadline")

    previous = signal.signal(signal.SIGUSR1, on_signal)
    collecting = gc.isenabled()
    gc.disable()  # no gc callback among the calls counted, nor interrupted
    try:
        naming._roots = None  # as at a program's first launch: the path roots are a step too
        with NamingSteps() as once:
            assert launch_new_line(fakegpu, compile("fakegpu.launch()", "first.py", "exec"))
        interrupted, wasted = 0, []
        for at in itertools.count(1):
            naming._roots = None
            code = compile("fakegpu.launch()", f"line{at}.py", "exec")
            with NamingSteps() as steps:
                if launch_new_line(fakegpu, code, interrupted_at=at):
                    break  # past the launch's last call: nothing left to interrupt
                interrupted += 1
                assert launch_new_line(fakegpu, code)  # taken again: completes
            wasted.append(steps.calls - once.calls)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        if collecting:
            gc.enable()
    assert interrupted >= len(ROOTS)
    # At most the step in progress is made again: one frame's place (its cell, the roots so far,
    # its short path) or function; never the roots made before it, one by one.
    assert max(wasted) <= 20, wasted
    assert all(kname.names()[f"<module> line{n}.py:1"] >= 1 for n in range(1, interrupted + 1))
    assert capsys.readouterr().err == ""


def test_under_a_timer_raising_every_few_hundred_microseconds_new_lines_are_named(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str]
) -> None:
    """The deadline pattern the trial met: a timer's handler raises TimeoutError every 0.3 ms
    (the trial's was 30-50 µs; generous here, for a loaded machine), and each launch is from a
    new line. Launches complete and their lines are named; the raises reach the program."""
    sandbox.install()
    fakegpu = sandbox.load("fakegpu")
    naming._roots = None  # the first launch makes the path roots, under the timer too
    source = "\n".join(f"def line{n}():\n    fakegpu.launch({n})" for n in range(2000))
    lines = {"fakegpu": fakegpu}
    exec(compile(source, "lines.py", "exec"), lines)
    armed, raised, ran = [False], [0], []

    def on_alarm(signum, frame):
        if armed[0]:
            raised[0] += 1
            raise TimeoutError("deadline")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    # No collection meanwhile: gc callbacks and finalizers are Python code where the timer's
    # exception is only printed (as in OneRaisePerRound).
    collecting = gc.isenabled()
    gc.disable()
    signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
    try:
        for n in range(2000):
            try:
                armed[0] = True  # raises only inside this try
                lines[f"line{n}"]()
                armed[0] = False
                ran.append(n)
            except TimeoutError:
                armed[0] = False
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if collecting:
            gc.enable()
    names = kname.names()
    assert ran and raised[0] > 0
    assert {f"line{n} lines.py:{2 * n + 2}" for n in ran} <= set(names)
    assert capsys.readouterr().err == ""
