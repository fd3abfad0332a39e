"""Backward passes in a profile: what autograd launches goes to the line that started the pass.

autograd runs a backward pass's GPU work on threads of its own (one per device), where a launch
has no Python frame above it, or only library frames (a compiled backward, a library's autograd
Function). While kname profile collects, the torch unit wraps `torch.autograd.backward` and
`torch.autograd.grad` (Tensor.backward calls the first), so that a pass, while it runs, is a
*scope* named after the line that started it, by the profile's own rules (`loss.backward()` in
the user's `step`). While a scope is open:

- a launch with no Python frame, on any thread, is named after the newest scope (both CUPTI
  callbacks: the C one is told each change through `listen`);
- a launch with only library frames above it, on a thread running an autograd node (the torch
  unit's test, `recognise_autograd_threads`), is named so too (capture.py asks
  `library_code_name`), marked (compile) where its library frames were compiling (a backward
  compiled at its first run).

The jax unit opens the same scopes around XLA's compile (marked COMPILE_MARK: `enter`'s `mark`)
and an executable's run through Python (`scoped`): XLA compiles, autotunes and builds its CUDA
graphs on threads of its own, where a launch has no Python frame.

Two passes running at once whose lines differ (threads of their own): autograd's threads do not
say whose pass their node is of, so their launches take the newest's name, marked CONCURRENT. A
pass started inside another (reentrant checkpointing, on autograd's thread) is named after the
outer one by the same rules, and so is not a second name. Nothing here runs per launch but one
read.

Backward per forward line: once the torch unit gives a reader of the forward line of the node
running on this thread (`know_forward_lines`: kname.profiling.torch_forward), a launch named
after an autograd pass (a scope opened with `autograd`: torch's backward and grad, never XLA's)
is named `backward_site(pass, forward line)` (kname.documents.backward_lines) where a node runs;
the C recorder asks `forward_named` under the GIL (`listen_forward`) only while such a pass is
the newest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from kname._locks import new_lock, reset_in_child
from kname._warnings import report_fault
from kname.callsite import COMPILE_MARK
from kname.documents.backward_lines import backward_site
from kname.patching import mark_wrapper

CONCURRENT = " [concurrent backward]"


class Scope:
    """One backward pass running: the name of the line that started it; `autograd`: a pass of
    torch's autograd (not XLA's work), whose launches may gain their forward line."""

    __slots__ = ("autograd", "name")

    def __init__(self, name: str, autograd: bool = False) -> None:
        self.name = name
        self.autograd = autograd


_lock = new_lock()
_namer: Callable[[FrameType], str] | None = None  # set while a profile collects
_scopes: list[Scope] = []  # the passes running, oldest first
_current: str | None = None  # what a frameless launch is named now (None: no pass runs)
_current_autograd = False  # whether the newest scope is autograd's: forward lines apply
# Told every change: the C recorder's set_frameless (one collects at a time: CUPTI has one
# subscriber per process).
_listener: Callable[[str | None], object] | None = None
# Told every change too: the torch allocator tracker's (memory_hooks), which names a block
# allocated on autograd's thread without the GIL, after the pass alone.
_also: list[Callable[[str | None], object]] = []


def _never() -> bool:
    return False


# Whether this thread is running an autograd node now: the torch unit's test, once torch is in.
_autograd_thread: Callable[[], bool] = _never


# The forward line of the node running on this thread (None: none runs): the torch unit's reader.
_forward_line: Callable[[], str | None] | None = None
# Told the namer to use for frameless launches (forward_named), or None: the C recorder's.
_forward_listener: Callable[[Callable[[str], str] | None], object] | None = None
# Told when a profile starts collecting (its namer) or stops (None): the torch unit's mode.
_followers: list[Callable[[Callable[[FrameType], str] | None], object]] = []


def recognise_autograd_threads(test: Callable[[], bool]) -> None:
    """`test()` says whether this thread is running an autograd node now (never raises)."""
    global _autograd_thread
    _autograd_thread = test


def collect(namer: Callable[[FrameType], str] | None) -> None:
    """While a profile collects, scopes are named by `namer(frame)`; None: no scope is opened
    from now on (those open close as their passes end)."""
    global _namer
    _namer = namer
    for follower in list(_followers):
        _tell_follower(follower, namer)


def follow_collection(follower: Callable[[Callable[[FrameType], str] | None], object]) -> None:
    """`follower(namer)` at every collect(), and now if a profile collects (the torch unit's)."""
    _followers.append(follower)
    if _namer is not None:
        _tell_follower(follower, _namer)


def _tell_follower(follower: Callable, namer: Callable[[FrameType], str] | None) -> None:
    try:  # the profile runs on, with or without forward lines
        follower(namer)
    except Exception as exc:
        report_fault("following kname profile for backward per forward line", exc)


def know_forward_lines(reader: Callable[[], str | None]) -> None:
    """`reader()` gives the forward line of the node running on this thread (None: none)."""
    global _forward_line
    _forward_line = reader
    _tell_forward_listener()


def listen_forward(listener: Callable[[Callable[[str], str] | None], object] | None) -> None:
    """`listener(forward_named)` now and whenever forward lines become known (None: none are)."""
    global _forward_listener
    _forward_listener = listener
    _tell_forward_listener()


def _tell_forward_listener() -> None:
    """The C recorder asks forward_named (under the GIL) only in an autograd pass: XLA's threads,
    never Python's, are not made to take the GIL."""
    listener = _forward_listener
    if listener is None:
        return
    try:
        wanted = _forward_line is not None and _current_autograd
        listener(forward_named if wanted else None)
    except Exception as exc:
        report_fault("naming a backward pass for kname profile", exc)


def forward_named(name: str) -> str:
    """`name` (a pass's) with the forward line of the node running on this thread, if one
    runs; a fault is said once and the launch keeps `name`."""
    reader = _forward_line
    if reader is None:
        return name
    try:
        forward = reader()
    except Exception as exc:
        report_fault("finding the forward line of a backward launch", exc)
        return name
    return name if forward is None else backward_site(name, forward)


def frameless_site() -> str | None:
    """The name of a launch with no Python frame now, with its forward line: None when no
    backward pass runs."""
    current = _current
    if current is None or not _current_autograd:
        return current
    return forward_named(current)


def enter(frame: FrameType, mark: str = "", autograd: bool = False) -> Scope | None:
    """A backward pass starts, called from `frame` (or XLA's work, its name with `mark` after
    it: the jax unit's); None when no profile collects."""
    namer = _namer
    if namer is None:
        return None
    name = namer(frame)
    scope = Scope(name if name.endswith(mark) else name + mark, autograd)
    with _lock:
        _scopes.append(scope)
        _changed()
    return scope


def scoped(
    entry: Callable[..., Any], what: str, mark: str = "", autograd: bool = False
) -> Callable[..., Any]:
    """`entry` opening a scope (its name with `mark` after it; `autograd`: torch's pass) while
    it runs, when a profile collects; one read when none does. A fault is one line naming
    `what`, and `entry` runs."""

    def run_with_scope(*args: Any, **kwargs: Any) -> Any:
        if _namer is None:  # no profile collects
            return entry(*args, **kwargs)
        scope = None
        try:
            scope = enter(sys._getframe(1), mark, autograd)
        except Exception as exc:  # the user's call runs, named or not
            report_fault(what, exc)
        try:
            return entry(*args, **kwargs)
        finally:
            leave(scope)

    return mark_wrapper(run_with_scope, entry)


def leave(scope: Scope | None) -> None:
    """The pass `enter` opened has ended (or raised)."""
    if scope is None:
        return
    with _lock:
        if scope in _scopes:
            _scopes.remove(scope)
        _changed()


def frameless_name() -> str | None:
    """The name of a launch with no Python frame now: None when no backward pass runs."""
    return _current


def library_code_name(name: str) -> str:
    """The name of a launch whose frames are all library code (named `name` by them); compile
    time work (a backward compiled at its first run) stays marked."""
    current = _current
    if current is None or not _autograd_thread():
        return name
    if name.endswith(COMPILE_MARK):
        return current + COMPILE_MARK
    return forward_named(current) if _current_autograd else current


def listen(listener: Callable[[str | None], object] | None) -> None:
    """`listener(frameless_name())` now and at every change, in place of any before (the C
    recorder's); None: nothing is told."""
    global _listener
    with _lock:
        _listener = listener
        _tell()


def listen_too(listener: Callable[[str | None], object]) -> Callable[[], None]:
    """`listener(frameless_name())` now and at every change, beside listen's; returns the undo."""
    with _lock:
        _also.append(listener)
        _tell_one(listener)

    def undo() -> None:
        with _lock:
            if listener in _also:
                _also.remove(listener)

    return undo


def _changed() -> None:
    """Under _lock: the name of frameless launches anew, told to every listener."""
    global _current, _current_autograd
    autograd = bool(_scopes) and _scopes[-1].autograd
    if not _scopes:
        _current = None
    else:
        newest = _scopes[-1].name
        # One line's compile inside its own run (an eager op's first call) is not concurrent.
        line = newest.removesuffix(COMPILE_MARK)
        alone = all(scope.name.removesuffix(COMPILE_MARK) == line for scope in _scopes)
        _current = newest if alone else newest + CONCURRENT
    if autograd and not _current_autograd:  # the namer first: no launch of it goes unasked
        _current_autograd = True
        _tell_forward_listener()
    _tell()
    if not autograd and _current_autograd:
        _current_autograd = False
        _tell_forward_listener()


def _tell() -> None:
    for listener in (_listener, *_also):
        if listener is not None:
            _tell_one(listener)


def _tell_one(listener: Callable[[str | None], object]) -> None:
    try:  # the user's backward pass runs on, whatever the listener does
        listener(_current)
    except Exception as exc:
        report_fault("naming a backward pass for kname profile", exc)


def _nothing_runs_in_a_child() -> None:
    """A forked child runs no pass of its parent's, and CUPTI does not follow it."""
    global _namer, _current, _listener, _forward_listener, _current_autograd
    _namer, _current, _listener, _forward_listener = None, None, None, None
    _also.clear()
    _current_autograd = False
    _scopes.clear()


reset_in_child(_nothing_runs_in_a_child)
