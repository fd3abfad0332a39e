"""Outputs written when SIGTERM ends the process; then it still dies of SIGTERM.

A Pool's terminate(), a batch job's time limit and `kill` end a program with SIGTERM, whose
default action skips atexit. Where the program leaves SIGTERM at that default, kname's handler
runs the writers (the launch census, a profile's outputs), puts the default back and sends the
signal again, so the exit status is the one the program would have had without kname. A
program's own SIGTERM handler is never replaced: its exit runs atexit, where the writers are too.

A Python handler runs only when the main thread next runs bytecode: a SIGTERM taken just before
a blocking call starts (`time.sleep`, a Pool worker's queue lock), or while C code never returns
to Python, would wait forever. Where the C extension kname._sigterm_guard is built, a watchdog
then interrupts the main thread's blocking call (which lets CPython run the handler), and where
that does not bring Python back, ends the process with SIGTERM's default action after
GRACE_SECONDS, without the writers.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from types import ModuleType

GRACE_SECONDS = 2.0  # how long a SIGTERM waits for the main thread to get back to Python

_writers: list[Callable[[], None]] = []
_guard: ModuleType | None = None  # kname._sigterm_guard, once it guards the handler
_fork_hook_registered = False


def write_on_sigterm(writer: Callable[[], None]) -> None:
    """Run `writer` if SIGTERM, left at its default action, ends this process (and its forked
    children, which inherit the handler: a writer checks whose process it is in)."""
    import signal  # here, not at the top: `import kname` imports this module

    _writers.append(writer)
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _guard_the_handler()
    except (ValueError, OSError):  # not the main thread: Python runs handlers there only
        pass


def _guard_the_handler() -> None:
    """Put kname._sigterm_guard in front of the handler just installed, where it is built."""
    global _guard, _fork_hook_registered
    try:
        guard = importlib.import_module("kname._sigterm_guard")
        guard.install(GRACE_SECONDS)
    except (ImportError, OSError):  # not built, or no thread to spare: the handler alone
        return
    _guard = guard
    if not _fork_hook_registered:
        # A forked child (a multiprocessing worker) inherits the guard but not its thread.
        os.register_at_fork(after_in_child=guard.after_fork_in_child)
        _fork_hook_registered = True


def _on_sigterm(signum: int, frame: object) -> None:
    import signal

    # First: kname._sigterm_guard's watchdog leaves the writers to finish (and stops nudging
    # this thread before the default action is back); a second SIGTERM kills at once.
    if _guard is not None:
        _guard.stand_down()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        for writer in list(_writers):
            with contextlib.suppress(Exception):  # each writer says its own faults
                writer()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # die of it, as without kname
