"""One-line messages on stderr, each said at most once per process."""

from __future__ import annotations

import contextlib
import os
import sys

from kname._locks import new_lock

_said: set[str] = set()
_lock = new_lock()


def warn_once(key: str, message: str) -> None:
    """Print `kname: message` on stderr the first time `key` is seen; never raises."""
    with _lock:
        if key in _said:
            return
        _said.add(key)
    # A closed or broken stderr must not break the user's program. One write of the whole line
    # (print writes the newline apart): the ranks of a job sharing one stderr keep their lines.
    with contextlib.suppress(Exception):
        sys.stderr.write(f"kname: {message}\n")
        sys.stderr.flush()


def report_fault(
    where: str, exc: BaseException, outcome: str = "the launch ran without a name"
) -> None:
    """Say once per kind of fault that kname failed internally; the launch itself still runs
    (`outcome`: what became of it)."""
    try:
        detail = f"{type(exc).__name__}: {exc}".replace("\r", "\\r").replace("\n", "\\n")
    except Exception:  # str(exc) itself failed: the fault must still not reach the program
        detail = type(exc).__name__
    warn_once(
        f"fault:{where}:{type(exc).__name__}",
        f"internal error while {where} ({detail}); {outcome}. Please report this; KNAME=0 "
        f"switches kname off.",
    )


def exit_at_once(status: int) -> None:
    """End the process with `status` from an atexit callback (past atexit nothing else can set
    it), flushing first what os._exit would drop."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
