"""kname._warnings: one-line messages on stderr, each said once per process, that never raise;
kname's own faults said once per kind; and the exit status set from an atexit callback."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from support import REPO

from kname import _warnings


def test_a_message_is_said_once_per_key_as_one_kname_line(capsys) -> None:
    _warnings.warn_once("KNAME_DEPTH", "KNAME_DEPTH='deep' is not a number; using 1")
    _warnings.warn_once("KNAME_DEPTH", "KNAME_DEPTH='deep' is not a number; using 1")
    _warnings.warn_once("KNAME_SKIP", "another key is said too")
    assert capsys.readouterr() == (
        "",
        "kname: KNAME_DEPTH='deep' is not a number; using 1\nkname: another key is said too\n",
    )


class BrokenStream(io.TextIOBase):
    def write(self, text: str) -> int:
        raise OSError("stderr is closed")


def test_a_broken_stderr_never_breaks_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", BrokenStream())
    _warnings.warn_once("key", "said to no one")
    _warnings.report_fault("naming a launch", ValueError("boom"))


def test_a_fault_is_said_once_per_place_and_kind_in_one_line(capsys) -> None:
    _warnings.report_fault("naming a launch", ValueError("bad\nvalue\r"))
    _warnings.report_fault("naming a launch", ValueError("another value"))  # same kind: not said
    _warnings.report_fault("naming a launch", KeyError("k"))
    _warnings.report_fault("pushing a range", ValueError("v"))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == (
        "kname: internal error while naming a launch (ValueError: bad\\nvalue\\r); the launch ran "
        "without a name. Please report this; KNAME=0 switches kname off."
    )
    assert "(KeyError: 'k')" in lines[1] and "while pushing a range (ValueError: v)" in lines[2]


def test_a_fault_whose_message_cannot_be_made_is_said_by_its_type(capsys) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    _warnings.report_fault("naming a launch", Unprintable())
    assert "internal error while naming a launch (Unprintable);" in capsys.readouterr().err


def test_exit_at_once_sets_the_status_and_keeps_what_exit_callbacks_printed() -> None:
    # atexit runs the latest callback first: the census table is printed, then the status set.
    program = (
        "import atexit, sys\n"
        "from kname import _warnings\n"
        "atexit.register(_warnings.exit_at_once, 2)\n"
        "atexit.register(lambda: print('table', end='') or print('err', end='', file=sys.stderr))\n"
    )  # fmt: skip
    # Buffered output, as a program whose output goes to a file or a pipe has it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "table", "err")
