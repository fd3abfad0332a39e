"""Writers run when SIGTERM ends the process, which still dies of it; a program's own handler
is left alone. While writers run, signals wait for them: a program's handler runs after, a
Ctrl-C at exit is dropped, a SIGTERM ends the process once every writer is done. In real
subprocesses: the signal and the exit status are the point.

The census and a profile's outputs on SIGTERM: test_census.py, test_profiling_session.py,
test_profiling_mode.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from support import REPO

PROGRAM = """
import os, signal, sys
from kname._sigterm import write_on_sigterm

if sys.argv[1:] == ["own-handler"]:
    signal.signal(signal.SIGTERM, lambda *_: (print("own handler", flush=True), sys.exit(7)))


def failing():
    raise RuntimeError("this writer fails")


write_on_sigterm(failing)
write_on_sigterm(lambda: print("written", flush=True))
os.kill(os.getpid(), signal.SIGTERM)
print("not reached", flush=True)
"""


def run(handler: str, program: str = PROGRAM) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", program, handler], env=env, capture_output=True, text=True
    )


def test_every_writer_runs_a_failing_one_too_and_the_process_dies_of_sigterm() -> None:
    done = run("default")
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout == "written\n"
    assert done.stderr == ""


def test_a_programs_own_sigterm_handler_is_left_in_place() -> None:
    done = run("own-handler")
    assert done.returncode == 7, done.stderr
    assert done.stdout == "own handler\n"


SHIELDED = """
import os, signal, sys
from kname._sigterm import at_exit

signal.signal(signal.SIGUSR1, lambda *_: print("the program's handler ran", flush=True))


def write(name, signals):
    def writer():
        # A signal that comes while a writer runs waits for the writers to finish.
        if signals:
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        sum(range(100_000))  # bytecodes, where Python would run a handler
        print(f"{name} written whole", flush=True)
    return writer


at_exit(write("second", signals=False))
first = at_exit(write("first", signals=True))
first()  # at most once in a process: atexit does not run it again
"""


def test_a_programs_handler_runs_once_the_writers_are_done() -> None:
    done = run("SIGUSR1", SHIELDED)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "first written whole",
        "the program's handler ran",
        "second written whole",
    ]


def test_a_ctrl_c_while_a_writer_runs_at_exit_is_no_traceback() -> None:
    done = run("SIGINT", SHIELDED)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "first written whole\nsecond written whole\n"


def test_a_sigterm_while_a_writer_runs_lets_every_writer_finish_then_ends_the_process() -> None:
    done = run("SIGTERM", SHIELDED)
    assert (done.returncode, done.stderr) == (-signal.SIGTERM, "")
    assert done.stdout == "first written whole\nsecond written whole\n"
