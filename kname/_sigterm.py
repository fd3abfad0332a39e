"""Outputs written when SIGTERM ends the process; then it still dies of SIGTERM.

A Pool's terminate(), a batch job's time limit and `kill` end a program with SIGTERM, whose
default action skips atexit. Where the program leaves SIGTERM at that default, kname's handler
runs the writers (the launch census, a profile's outputs), puts the default back and sends the
signal again, so the exit status is the one the program would have had without kname. A
program's own SIGTERM handler is never replaced: its exit runs atexit, where the writers are too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

_writers: list[Callable[[], None]] = []


def write_on_sigterm(writer: Callable[[], None]) -> None:
    """Run `writer` if SIGTERM, left at its default action, ends this process (and its forked
    children, which inherit the handler: a writer checks whose process it is in)."""
    import signal  # here, not at the top: `import kname` imports this module

    _writers.append(writer)
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread: Python runs handlers there only
        pass


def _on_sigterm(signum: int, frame: object) -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
    try:
        for writer in list(_writers):
            with contextlib.suppress(Exception):  # each writer says its own faults
                writer()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # die of it, as without kname
