"""Writers run when SIGTERM ends the process, which still dies of it; a program's own handler
is left alone. In real subprocesses: the signal and the exit status are the point.

The census and a profile's outputs on SIGTERM: test_census.py, test_profile_session.py,
test_profile_mode.py.
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


def run(handler: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, handler], env=env, capture_output=True, text=True
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
