"""Outputs written when SIGTERM ends the process; then it still dies of SIGTERM.

A Pool's terminate(), a batch job's time limit and `kill` end a program with SIGTERM, whose
default action skips atexit. Where the program leaves SIGTERM at that default, kname's handler
runs the writers (the launch census, a profile's outputs), puts the default back and sends the
signal again, so the exit status is the one the program would have had without kname. A
program's own SIGTERM handler is never replaced: its exit runs atexit, where the writers are too.

A Python handler runs only when the main thread next runs bytecode: a SIGTERM taken just before
a blocking call starts (`time.sleep`, a Pool worker's queue lock), or while C code never returns
to Python, would wait forever. Where the C extension kname._sigterm_guard is built, a timer (no
thread: a program stays single-threaded) then interrupts the main thread's blocking call (which
lets CPython run the handler), and where that does not bring Python back, ends the process with
SIGTERM's default action after GRACE_SECONDS, without the writers.

While a writer runs, at exit or on SIGTERM, no Python signal handler runs inside it: each signal
that comes meanwhile (a Ctrl-C, a program's SIGALRM timeout) waits for the writers to finish, and
its handler then runs, so an output is written whole. A Ctrl-C left to Python's default handler
is dropped then: the process is ending, and its KeyboardInterrupt would only be a traceback from
the exit. A SIGTERM that comes while the writers run at exit lets them finish, then ends the
process as above; a second SIGTERM ends it at once.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from types import ModuleType

GRACE_SECONDS = 2.0  # how long a SIGTERM waits for the main thread to get back to Python

_writers: list[Callable[[], None]] = []
_guard: ModuleType | None = None  # kname._sigterm_guard, once it guards the handler
_fork_hook_registered = False

# While writers run: how deeply they nest (SIGTERM's inside atexit's), the handlers held off
# and the signals that came meanwhile, and whether a SIGTERM is to end the process after them.
_depth = 0
_held: dict[int, Callable[..., object]] = {}
_arrived: list[int] = []
_sigterm_pending = False


def at_exit(write: Callable[[], None]) -> Callable[[], None]:
    """Run `write` as this process ends: at interpreter exit, or when SIGTERM (left at its
    default action) ends it; at most once in each process, and shielded from signals.

    Returns that writer, for other ends a process has (multiprocessing's Finalize in a worker).
    """
    writer = shielded_at_exit(write)
    write_on_sigterm(writer)
    return writer


def shielded_at_exit(work: Callable[[], None]) -> Callable[[], None]:
    """Run `work` at interpreter exit, at most once in each process, shielded from signals: a
    Ctrl-C then is no traceback of kname's exit code (SIGTERM's default action skips it).

    Returns the callback registered, which does the work once however often it is called.
    """
    import atexit

    done_in: list[int] = []  # the pid of the process that ran it (a forked child has its own)

    def once() -> None:
        # Each way out is inside the try: CPython raises a pending Ctrl-C at a loop's backward
        # jump, and a Ctrl-C just after the shield is down would be raised there, outside it.
        while True:
            try:
                with _shielded():
                    if os.getpid() not in done_in:
                        done_in.append(os.getpid())
                        work()
                return
            except KeyboardInterrupt:
                continue  # before the shield was up, the work is still owed; after, it is done

    try:  # a Ctrl-C pending as it begins is dropped in C, not raised at its first line
        atexit.register(importlib.import_module("kname._sigterm_guard").call_at_exit, once)
    except ImportError:  # not built: such a Ctrl-C is a traceback from its first line
        atexit.register(once)
    return once


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
    except (ImportError, OSError):  # not built, or no timer to be had: the handler alone
        return
    _guard = guard
    if not _fork_hook_registered:
        # A forked child (a multiprocessing worker) inherits the guard but not its timer.
        os.register_at_fork(after_in_child=guard.after_fork_in_child)
        _fork_hook_registered = True


def _on_sigterm(signum: int, frame: object) -> None:
    import signal

    global _sigterm_pending
    # First: kname._sigterm_guard's timer leaves the writers to finish (and stops nudging
    # this thread before the default action is back); a second SIGTERM kills at once.
    if _guard is not None:
        _guard.stand_down()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _depth:  # a writer is running (atexit's): it finishes, then the process ends
        _sigterm_pending = True
        return
    _end_by_sigterm()


def _end_by_sigterm() -> None:
    """Run every writer (those done already return at once), then die of SIGTERM."""
    import signal

    try:
        with _shielded():
            for writer in list(_writers):
                with contextlib.suppress(Exception):  # each writer says its own faults
                    writer()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # die of it, as without kname


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Hold off Python's signal handlers while writers run; run them (or end) afterwards."""
    global _depth, _sigterm_pending
    if _depth == 0:
        _hold_signals()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            _release_signals()
            if _sigterm_pending:
                _sigterm_pending = False
                _end_by_sigterm()


def _hold_signals() -> None:
    """Put a handler that only notes the signal in place of each Python handler (SIGINT first:
    after that no KeyboardInterrupt can come); kname's SIGTERM handler knows the writers."""
    import signal

    for signum in sorted(signal.valid_signals(), key=lambda s: s != signal.SIGINT):
        while True:
            try:
                handler = signal.getsignal(signum)
                if callable(handler) and handler not in (_on_sigterm, _note_arrival):
                    signal.signal(signum, _note_arrival)
                    _held[signum] = handler
                break
            except KeyboardInterrupt:
                continue  # a Ctrl-C handled just before its handler was held: held next time
            except (ValueError, OSError):  # not the main thread, or a signal Python cannot set
                break


def _note_arrival(signum: int, frame: object) -> None:
    if signum not in _arrived:
        _arrived.append(signum)


def _release_signals() -> None:
    """Put the held handlers back, then run each for the signals that came meanwhile."""
    import signal

    held = dict(_held)
    _held.clear()
    for signum, handler in held.items():
        signal.signal(signum, handler)
    arrived = list(_arrived)
    _arrived.clear()
    for signum in arrived:
        if held.get(signum) is signal.default_int_handler:
            continue  # a Ctrl-C as the process ends: nothing is left for it to stop
        signal.raise_signal(signum)  # its handler runs now, as if the signal came now
