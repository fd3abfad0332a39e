"""Reliability against what interrupts a launch: signal handlers that launch, async exceptions
(KeyboardInterrupt from a signal handler, or sent to another thread), and os.fork() while another
thread makes its first launch.

Real programs in a venv with kname's wheel, switched on by KNAME=1, under NVTX capture (see
test_reliability). Each program arms faulthandler: a deadlock ends it with every thread's
traceback on stderr and a non-zero exit, so the test fails instead of hanging.
"""

from __future__ import annotations

import json

import pytest
from support import line_of
from test_reliability import NOOP_TARGET, count_ranges, kname_lines, run_program

pytestmark = [pytest.mark.slow, pytest.mark.launches]

# --------------------------------------------------------------------------
# A signal handler that launches (and warns, and names) inside a kname critical section
# --------------------------------------------------------------------------

HANDLER_INSIDE_EVERY_LOCK = """\
import faulthandler
import json
import signal

import kname
import noop
from kname import _locks, _warnings

faulthandler.dump_traceback_later(30, exit=True)  # a deadlock fails the test, with tracebacks
handled = []


def on_signal(signum, frame):
    # A fresh code object each time: a call site never seen, built inside the handler.
    n = len(handled)
    exec(compile(f"noop.launch({n})", f"handler{n}.py", "exec"), {"noop": noop})
    exec(compile("kname.site_name()", f"named{n}.py", "exec"), {"kname": kname})
    _warnings.warn_once(f"handler{n}", f"said from handler {n}")
    kname.names()
    handled.append(n)


signal.signal(signal.SIGUSR1, on_signal)
noop.launch(-1)  # main-line: kname's NVTX domain and attributes exist
for lock in _locks.all_locks():  # every lock kname has made
    with lock:  # as kname's own code holds it, the handler runs inside the critical section
        signal.raise_signal(signal.SIGUSR1)
print(json.dumps({"locks": len(_locks.all_locks()), "handled": handled, "names": kname.names()}))
"""


def test_a_signal_handler_that_launches_inside_any_kname_critical_section_does_not_deadlock(
    kname_venv, inject_lib, tmp_path
) -> None:
    """Issue 16 item 2: each lock kname has is held, as kname's code holds it, when a signal
    arrives whose handler launches from a new line, names a line, warns and reads the census."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, HANDLER_INSIDE_EVERY_LOCK, env=NOOP_TARGET, timeout=90
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["locks"] >= 4  # callsite, ranges, warnings, lifecycle at least
    assert out["handled"] == list(range(out["locks"]))
    assert kname_lines(done.stderr) == [f"kname: said from handler {n}" for n in out["handled"]]
    handler_sites = {f"<module> handler{n}.py:1": 1 for n in out["handled"]}
    main_site = f"<module> prog.py:{line_of(HANDLER_INSIDE_EVERY_LOCK, 'main-line')}"
    assert out["names"] == {main_site: 1, **handler_sites}
    assert count_ranges(capture) == {main_site: 1, **handler_sites}
    assert capture.balanced(), capture.stack_errors()


HANDLER_STORM = """\
import faulthandler
import itertools
import json
import signal
import sys

import kname
import noop

faulthandler.dump_traceback_later(60, exit=True)  # a deadlock fails the test, with tracebacks
sites, wanted = int(sys.argv[1]), int(sys.argv[2])
handled = []
numbers = itertools.count()  # handlers can nest: each takes its number before it launches


def on_signal(signum, frame):
    n = next(numbers)
    exec(compile(f"noop.launch({n})", f"handler{n}.py", "exec"), {"noop": noop})
    handled.append(n)


signal.signal(signal.SIGALRM, on_signal)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
made = 0
while made < sites or len(handled) < wanted:  # the main thread keeps building new call sites
    exec(compile(f"noop.launch({made})", f"main{made}.py", "exec"), {"noop": noop})
    made += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print(json.dumps({"made": made, "handled": len(handled), "names": kname.names()}))
"""


def test_a_signal_handler_launching_while_the_main_thread_builds_sites_does_not_deadlock(
    kname_venv, inject_lib, tmp_path
) -> None:
    """Issue 16 item 2 as the trial met it: SIGALRM every 0.5 ms, the handler launching from a
    new line, while the main thread does nothing but build new call sites."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, HANDLER_STORM, "2000", "300", env=NOOP_TARGET,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert kname_lines(done.stderr) == []
    out = json.loads(done.stdout)
    expected = {f"<module> main{n}.py:1": 1 for n in range(out["made"])}
    expected |= {f"<module> handler{n}.py:1": 1 for n in range(out["handled"])}
    assert out["names"] == expected
    assert count_ranges(capture) == expected
    assert capture.balanced(), capture.stack_errors()


# --------------------------------------------------------------------------
# Async exceptions: the range is always closed
# --------------------------------------------------------------------------

INTERRUPTED = """\
import ctypes
import faulthandler
import json
import signal
import sys
import threading
import time

import kname
import noop
from kname import _locks

faulthandler.dump_traceback_later(60, exit=True)  # a deadlock fails the test, with tracebacks
wanted = int(sys.argv[1])
# The worker's exception lands when it next takes the GIL: switching ten times as often lands the
# 300 in a second (about 100 000 launches, 600 new sites) in place of seven.
sys.setswitchinterval(0.0005)
set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
# An exception may only arrive while its thread is inside the try below ("armed"); the worker's
# arrives at its next check, so one is sent only once the last one has landed ("pending").
main = {"armed": False, "caught": 0}
worker = {"armed": False, "caught": 0, "pending": False, "ident": None}
stop = threading.Event()


def launches(n):
    noop.launch(n)  # line-a
    noop.launch(-n)  # line-b
    if n % 64 == 0:  # now and then a new call site: kname's locks are taken
        exec(compile(f"noop.launch({n})", f"new{n}.py", "exec"), {"noop": noop})


def on_alarm(signum, frame):
    if worker["armed"] and not worker["pending"]:
        worker["pending"] = True
        set_async_exc(worker["ident"], KeyboardInterrupt)
    if main["armed"]:
        raise KeyboardInterrupt


def loop(state, until):
    n = 0
    while not until():
        try:
            state["armed"] = True
            while not until():
                n += 1
                launches(n)
            state["armed"] = False
        except KeyboardInterrupt:
            state["armed"] = False
            state["pending"] = False
            state["caught"] += 1


worker_thread = threading.Thread(target=loop, args=(worker, stop.is_set))
worker_thread.start()
while worker["ident"] is None:
    worker["ident"] = worker_thread.ident
signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
loop(main, lambda: main["caught"] >= wanted)
while worker["caught"] < wanted:  # the worker is still interrupted from the main thread
    signal.pause()
signal.setitimer(signal.ITIMER_REAL, 0)
while worker["pending"]:  # the last exception sent has landed
    time.sleep(0.001)
stop.set()
worker_thread.join()

free = []  # kname's locks, taken from a thread that never ran a launch
def try_locks():
    for lock in _locks.all_locks():
        if lock.acquire(timeout=5):
            lock.release()
            free.append(True)
        else:
            free.append(False)
checker = threading.Thread(target=try_locks)
checker.start()
checker.join()
noop.launch(0)  # after-line: a clean stack, nothing nests under a stale range
print(json.dumps({"main": main["caught"], "worker": worker["caught"], "free": free}))
"""


def test_async_exceptions_at_any_point_of_a_launch_leave_no_range_open(
    kname_venv, inject_lib, tmp_path
) -> None:
    """Issue 16 item 4: KeyboardInterrupt raised by a signal handler in the main thread, and
    sent (PyThreadState_SetAsyncExc) to a thread, 300 times each at random points of a loop of
    launches (cache hits and new sites): every range pushed is popped, none nests, no lock stays
    held, kname says nothing."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, INTERRUPTED, "300", env=NOOP_TARGET, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert kname_lines(done.stderr) == []
    out = json.loads(done.stdout)
    assert out["main"] >= 300 and out["worker"] >= 300
    assert out["free"] and all(out["free"]), out["free"]
    assert capture.balanced(), capture.stack_errors()[:5]
    assert capture.max_depth("kname") == 1
    after = f"<module> prog.py:{line_of(INTERRUPTED, 'after-line')}"
    assert capture.ranges("kname")[-1] == after


# --------------------------------------------------------------------------
# Fork while another thread makes its first launch
# --------------------------------------------------------------------------

FORK_DURING_FIRST_LAUNCH = """\
import faulthandler
import json
import os
import signal
import sys
import threading
import time

import kname
import noop

faulthandler.dump_traceback_later(60, exit=True)
imports = []  # modules imported by the thread's first launch
importing, release, launched = threading.Event(), threading.Event(), threading.Event()
launcher = None


class Stall:
    \"\"\"Holds any import the launching thread makes, with that module's import lock, until the
    main thread has forked: the worst moment for the child.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if threading.current_thread() is launcher and not launched.is_set():
            imports.append(name)
            importing.set()
            release.wait(20)
        return None


def first_launch():
    noop.launch(1)  # thread-line
    launched.set()


sys.meta_path.insert(0, Stall())
launcher = threading.Thread(target=first_launch)
launcher.start()
while not (importing.is_set() or launched.is_set()):
    time.sleep(0.001)
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang kills the child
    result = noop.launch(2)  # child-line
    print(json.dumps({"child": result, "names": kname.names()}), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
release.set()
launcher.join()
print(json.dumps({"child_exit": os.waitstatus_to_exitcode(status), "imports": imports}))
"""


@pytest.mark.parametrize("mode", ["nvtx", "census"])
def test_a_child_forked_during_another_threads_first_launch_launches(
    kname_venv, inject_lib, tmp_path, mode
) -> None:
    """Issue 16 item 3: a first launch imports nothing (install() did it), so a child forked
    while another thread makes one cannot inherit a held import lock."""
    done, capture = run_program(
        kname_venv, inject_lib, tmp_path, FORK_DURING_FIRST_LAUNCH,
        env={**NOOP_TARGET, "KNAME_MODE": mode, "PYTHONWARNINGS": "ignore::DeprecationWarning"},
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    *child, parent = (json.loads(line) for line in done.stdout.splitlines())
    assert parent == {"child_exit": 0, "imports": []}, done.stderr
    child_site = f"<module> prog.py:{line_of(FORK_DURING_FIRST_LAUNCH, 'child-line')}"
    assert child == [{"child": 5, "names": {child_site: 1}}]
    if mode == "nvtx":
        thread_site = f"first_launch prog.py:{line_of(FORK_DURING_FIRST_LAUNCH, 'thread-line')}"
        assert sorted(capture.ranges("kname")) == sorted([thread_site, child_site])
        assert capture.balanced(), capture.stack_errors()
