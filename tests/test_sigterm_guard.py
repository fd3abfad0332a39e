"""kname._sigterm_guard: a SIGTERM that Python never gets to handle still ends the process.

The lost wake-up, made deterministic: the program calls a tiny C library, built here, that
loops on pause(); each signal returns from pause() but control never reaches Python, so
kname's Python handler never runs (as in a Pool worker that took SIGTERM just before blocking in
sem_wait). In real subprocesses: the signal, the handlers and the exit status are the point.
The normal path (writers, then death by SIGTERM) is tests/test_sigterm.py's and the census
tests' (every multiprocessing method and ending).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO

COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="kname._sigterm_guard is built on Linux only"
)
HANG = 30  # seconds: far past the grace; a process alive then would have hung
GRACE = 0.3  # the programs' grace, in place of kname's 2 s: the tests that wait past it wait less
try:  # the guard's behaviour needs it built; test_native's build tests fail where it should be
    import kname._sigterm_guard as GUARD
except ImportError as exc:
    GUARD, NO_GUARD = None, f"kname._sigterm_guard is not built here: {exc}"
NEEDS_GUARD = pytest.mark.skipif(GUARD is None, reason=NO_GUARD if GUARD is None else "")

BLOCKING_C = r"""
#include <unistd.h>

/* Says it is ready, from C: from here on, no signal is handled by Python. */
void block_in_c(void)
{
    if (write(1, "ready\n", 6) != 6) {
        return;
    }
    for (;;) {
        pause();
    }
}
"""

PROGRAM = """
import ctypes, os, sys

library, guard, where = sys.argv[1:]
if guard == "no-guard":  # as where the extension is not built
    sys.modules["kname._sigterm_guard"] = None
from kname import _sigterm
from kname._sigterm import write_on_sigterm

_sigterm.GRACE_SECONDS = float(os.environ["GRACE"])
write_on_sigterm(lambda: print("written", flush=True))
if where == "forked-child":
    child = os.fork()
    if child:
        # One write(2): the child writes `ready` to the same pipe meanwhile (a print may be two
        # writes, the text and its newline, where PYTHONUNBUFFERED is set).
        os.write(1, f"child {child}\\n".encode())
        _, status = os.waitpid(child, 0)
        print(f"child ended by signal {os.WTERMSIG(status)}", flush=True)
        sys.exit(0)
ctypes.CDLL(library).block_in_c()
"""


def shared_library(factory: pytest.TempPathFactory, name: str, source: str) -> Path:
    """`source` built as lib<name>.so (with Python's headers at hand), for ctypes to load."""
    if COMPILER is None:
        pytest.skip(f"no C compiler to build the {name} library")
    folder = factory.mktemp(name)
    (folder / f"{name}.c").write_text(source)
    library = folder / f"lib{name}.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [
            COMPILER,
            "-shared",
            "-fPIC",
            f"-I{include}",
            "-o",
            str(library),
            str(folder / f"{name}.c"),
        ],
        check=True,
    )
    return library


@pytest.fixture(scope="module")
def blocking_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_library(tmp_path_factory, "block", BLOCKING_C)


@contextlib.contextmanager
def started(*args: str) -> Iterator[subprocess.Popen]:
    """The program running; killed at the end if it still runs (a test that failed by a hang
    must not hang the suite)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), GRACE=str(GRACE))
    with subprocess.Popen(
        [sys.executable, "-c", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    ) as program:  # fmt: skip
        try:
            yield program
        finally:
            if program.poll() is None:
                program.kill()


def run(program: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=HANG
    )


@NEEDS_GUARD
def test_a_sigterm_taken_in_c_code_that_never_returns_to_python_still_ends_the_process(
    blocking_library: Path,
) -> None:
    with started(PROGRAM, str(blocking_library), "guard", "owner") as program:
        assert program.stdout.readline() == "ready\n"
        program.send_signal(signal.SIGTERM)
        stdout, stderr = program.communicate(timeout=HANG)
    assert program.returncode == -signal.SIGTERM, stderr
    assert stdout == ""  # the price: Python never ran, so neither did the writers
    assert stderr == ""


def test_without_the_guard_that_sigterm_is_lost_and_the_process_hangs(
    blocking_library: Path,
) -> None:
    """The bug itself: what the test above would see without kname._sigterm_guard."""
    with started(PROGRAM, str(blocking_library), "no-guard", "owner") as program:
        assert program.stdout.readline() == "ready\n"
        program.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            program.wait(timeout=2 * GRACE + 1)


@NEEDS_GUARD
def test_a_forked_child_has_a_guard_of_its_own(blocking_library: Path) -> None:
    with started(PROGRAM, str(blocking_library), "guard", "forked-child") as program:
        lines = [program.stdout.readline(), program.stdout.readline()]  # in either order
        assert "ready\n" in lines
        (child,) = [int(line.split()[1]) for line in lines if line.startswith("child ")]
        try:
            os.kill(child, signal.SIGTERM)
            stdout, stderr = program.communicate(timeout=HANG)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)  # a child left hanging, past the test
    assert program.returncode == 0, stderr
    assert stdout == f"child ended by signal {int(signal.SIGTERM)}\n"


TRIP_THEN_CALL_C = r"""
#include <Python.h>
#include <signal.h>

/* SIGTERM taken (CPython's C handler sets its flag), then a blocking call made before Python
 * checks that flag again: a signal landing just after CPython's last check and before
 * time.sleep's system call, made certain. */
PyObject *trip_then_call(PyObject *callable, PyObject *argument)
{
    raise(SIGTERM);
    return PyObject_CallOneArg(callable, argument);
}
"""

TRIP_THEN_SLEEP = """
import ctypes, os, sys, time

library, guard = sys.argv[1:]
if guard == "no-guard":  # as where the extension is not built
    sys.modules["kname._sigterm_guard"] = None
from kname import _sigterm
from kname._sigterm import write_on_sigterm

_sigterm.GRACE_SECONDS = float(os.environ["GRACE"])
write_on_sigterm(lambda: print("written", flush=True))
trip_then_call = ctypes.PyDLL(library).trip_then_call
trip_then_call.restype = ctypes.py_object
trip_then_call.argtypes = [ctypes.py_object, ctypes.py_object]
print("ready", flush=True)
trip_then_call(time.sleep, 60)
print("slept through", flush=True)
"""


@pytest.fixture(scope="module")
def tripping_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_library(tmp_path_factory, "trip", TRIP_THEN_CALL_C)


@NEEDS_GUARD
def test_a_sigterm_taken_just_before_a_sleep_starts_still_runs_the_writers(
    tripping_library: Path,
) -> None:
    """The guard's nudge interrupts the sleep, and CPython runs kname's handler at once."""
    with started(TRIP_THEN_SLEEP, str(tripping_library), "guard") as program:
        stdout, stderr = program.communicate(timeout=HANG)
    assert program.returncode == -signal.SIGTERM, stderr
    assert stdout == "ready\nwritten\n"
    assert stderr == ""


def test_without_the_guard_a_sigterm_taken_just_before_a_sleep_waits_for_the_sleep(
    tripping_library: Path,
) -> None:
    """The race itself: what the test above would see without kname._sigterm_guard."""
    with started(TRIP_THEN_SLEEP, str(tripping_library), "no-guard") as program:
        assert program.stdout.readline() == "ready\n"
        with pytest.raises(subprocess.TimeoutExpired):
            program.wait(timeout=2 * GRACE + 1)


SLOW_WRITER = """
import os, signal, time
from kname import _sigterm, _sigterm_guard

_sigterm.GRACE_SECONDS = 0.2


def slow_writer():
    time.sleep(1.0)  # five times the grace: the guard must leave a running handler be
    print("written; guard still in place:", _sigterm_guard.installed(), flush=True)


_sigterm.write_on_sigterm(slow_writer)
assert _sigterm_guard.installed()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
"""


@NEEDS_GUARD
def test_a_python_handler_that_runs_past_the_grace_is_left_to_finish() -> None:
    done = run(SLOW_WRITER)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout == "written; guard still in place: False\n"  # SIG_DFL replaced it
    assert done.stderr == ""


PLACES = """
import signal, sys
from kname import _sigterm, _sigterm_guard

if sys.argv[1] == "own-handler-first":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
_sigterm.write_on_sigterm(lambda: None)
print("after kname:", _sigterm_guard.installed())
if sys.argv[1] == "own-handler-later":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    print("after the program's handler:", _sigterm_guard.installed())
"""


@NEEDS_GUARD
@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("own-handler-first", "after kname: False\n"),
        ("own-handler-later", "after kname: True\nafter the program's handler: False\n"),
    ],
)
def test_the_guard_is_only_where_kname_handles_sigterm(order: str, expected: str) -> None:
    done = run(PLACES.replace("sys.argv[1]", repr(order)))
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected


@pytest.mark.skipif(COMPILER is None, reason="no C compiler")
def test_the_c_file_compiles_without_warnings(tmp_path: Path) -> None:
    include = sysconfig.get_paths()["include"]
    flags = sysconfig.get_config_var("CFLAGS") or ""
    # Compiled for real (-fsyntax-only says nothing of functions left unused), optimised.
    done = subprocess.run(
        [COMPILER, "-c", "-fPIC", *flags.split(), "-Wall", "-Wextra", "-Werror", f"-I{include}",
         str(REPO / "kname" / "_sigterm_c" / "sigterm_guard.c"), "-o", str(tmp_path / "guard.o")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


# A Ctrl-C that came just before an exit callback of kname's: blocked while the program ends,
# then let through by libc (no Python call, which would take it first) by the callback that
# atexit runs before kname's, so it is pending as kname's begins.
CTRL_C_BEFORE_KNAME_EXIT = """
import atexit, ctypes, os, signal, sys
if sys.argv[1] == "unguarded":
    sys.modules["kname._sigterm_guard"] = None
from kname import _sigterm

_sigterm.shielded_at_exit(lambda: print("kname's exit work ran"))
signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, even in a background job
libc = ctypes.CDLL(None)
interrupt = ctypes.create_string_buffer(128)  # a sigset_t
libc.sigemptyset(interrupt)
libc.sigaddset(interrupt, signal.SIGINT)
atexit.register(libc.pthread_sigmask, signal.SIG_UNBLOCK, interrupt, None)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
os.kill(os.getpid(), signal.SIGINT)
"""


@NEEDS_GUARD
def test_a_ctrl_c_pending_as_an_exit_callback_begins_is_dropped_and_its_work_done() -> None:
    done = run(CTRL_C_BEFORE_KNAME_EXIT.replace("sys.argv[1]", "'guarded'"))
    assert (done.returncode, done.stdout, done.stderr) == (0, "kname's exit work ran\n", "")


def test_without_the_guard_that_ctrl_c_is_a_traceback_from_the_callbacks_first_line() -> None:
    done = run(CTRL_C_BEFORE_KNAME_EXIT.replace("sys.argv[1]", "'unguarded'"))
    assert done.stdout == "" and "KeyboardInterrupt" in done.stderr
    assert "_sigterm.py" in done.stderr


# Python 3.12's os.fork() warns ("This process is multi-threaded, use of fork() may lead to
# deadlocks") where the process has more than one OS thread: a census asked for must add none.
CENSUS_THEN_FORK = """
import os, sys, threading, warnings
import kname

kname.install()  # KNAME_MODE=census, KNAME_REPORT: the census is written at exit, or at SIGTERM
assert kname._sigterm_guard.installed()
print("threads:", len(os.listdir("/proc/self/task")), threading.active_count(), flush=True)
warnings.simplefilter("error", DeprecationWarning)
child = os.fork()
if child == 0:
    os._exit(0)
os.waitpid(child, 0)
print("forked", flush=True)
"""


@NEEDS_GUARD
def test_a_census_asked_for_keeps_a_single_threaded_program_single_threaded(
    tmp_path: Path,
) -> None:
    census = tmp_path / "census.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), KNAME_MODE="census", KNAME_REPORT=str(census))
    done = subprocess.run(
        [sys.executable, "-c", CENSUS_THEN_FORK], env=env, capture_output=True, text=True,
        timeout=HANG,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "threads: 1 1\nforked\n"
    assert census.is_file()
