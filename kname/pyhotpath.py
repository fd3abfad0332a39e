"""The pure-Python hot path: the twin of each type of kname's C extension (kname/_native.pyi).

kname.hotpath hands these out where the extension is not in use (not built, not CPython 3.11+
with the GIL, or KNAME_NATIVE=0). Each takes the same arguments as its C twin and behaves the
same; the C ones cost less per launch. Nothing here imports the rest of kname: what a launch
needs from the naming core (the sites, resolve, the fault handler) is handed in.
"""

from __future__ import annotations

import functools
import itertools
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

# The C Counter's twin: next() on it is atomic under the GIL, so no launch is lost to threads.
Counter = itertools.count
# Where a fault happened, as the C wrapper says it too.
FINDING = "finding a launch's name"
OPENING = "opening a launch's NVTX range"
CLOSING = "closing a launch's NVTX range"
# A launch wrapper's `launchers` (kname.targets.Options.nesting), as the C wrapper reads them: a
# launch inside a KNAME_TARGETS launcher is not one of its own; the wrapper is a launcher's.
UNNAMED_IN_LAUNCHERS, LAUNCHER = 1, 2


class _Launchers(threading.local):
    running = 0  # launchers running on this thread (a class default: no AttributeError)


_launchers = _Launchers()


def inside_launcher() -> bool:
    """Whether a KNAME_TARGETS launcher's wrapper is running on this thread (the C twin's
    kname._native.inside_launcher)."""
    return _launchers.running > 0


class KernelArg:
    """A `kernel_of`: the kernel is `args[index]` (or its `attribute`); None when args is shorter.

    The C wrapper reads it as the tuple (index, attribute), with no call into Python.
    """

    __slots__ = ("attribute", "index")

    def __init__(self, index: int, attribute: str | None = None) -> None:
        self.index, self.attribute = index, attribute

    def __call__(self, args: tuple) -> Any:
        if len(args) <= self.index:
            return None
        kernel = args[self.index]
        return kernel if self.attribute is None else getattr(kernel, self.attribute)

    def __repr__(self) -> str:
        return f"KernelArg({self.index}, {self.attribute!r})"


def launch_wrapper(
    original: Callable[..., Any],
    kernel: Any,
    switch: Any,
    sites: dict[tuple, Any],
    resolve: Callable[[FrameType, Any], Any],
    fault: Callable[..., bool],
    kinds: dict[int, int],
    launchers: int = 0,
    miss: Any = None,
) -> Callable[..., Any]:
    """The twin of kname._native.LaunchWrapper: a closure that names each call of `original`.

    `kernel`: None (`original` is the kernel), (index, attribute) or a callable of the args.
    A miss calls `resolve(frame, kernel)`. A failure goes to `fault(frame, kernel, site, exc,
    where, again)`, which says whether it was kname's own (kname.site_faults.pass_through): then the
    launch runs; else the exception propagates, before the launch. Finding the site is taken
    once more first, its failure (or None) as `again`: a fault of kname's own recurs. `kinds` is
    for the C wrapper's walk and `miss` for its naming of a miss (here, resolve does both).
    """
    kernel_of = KernelArg(*kernel) if isinstance(kernel, tuple) else kernel
    if launchers & UNNAMED_IN_LAUNCHERS:
        kernel_of = _outside_launchers(kernel_of, original)
    if launchers & LAUNCHER:  # marked around the call only: its own naming reads the outer mark
        original = _running_as_launcher(original)
    getframe = sys._getframe

    def kname_launch(*args, **kwargs):
        if not switch.on:
            return original(*args, **kwargs)
        site = frame = None
        try:
            kernel = original if kernel_of is None else kernel_of(args)
            if kernel is not None:
                try:
                    frame = getframe(1)
                except ValueError:  # called from C with no Python frame above: unnamed
                    frame = _caller_of_caller()
                    if frame is not None:  # not getframe's: raised into kname from outside
                        raise
                if frame is not None:
                    site = sites.get((id(frame.f_code), frame.f_lasti, id(kernel)))
                    if site is None:
                        site = resolve(frame, kernel)
                    if site is not None:
                        next(site.counter)
        except Exception as exc:  # kname's own fault, or raised into kname from outside
            kernel = locals().get("kernel")  # unbound if kernel_of itself failed
            frame = frame or _caller_of_caller()
            # Not taken again at the recursion limit (no room), nor once the site was found (the
            # count is not undone: a counter fails in its own code, anything at once after it).
            again = exc
            if site is None and not isinstance(exc, RecursionError):
                try:  # the same steps in this frame, uncounted: a fault of kname's fails alike
                    kernel = original if kernel_of is None else kernel_of(args)
                    key = None if frame is None else (id(frame.f_code), frame.f_lasti, id(kernel))
                    if kernel is not None and key is not None and sites.get(key) is None:
                        resolve(frame, kernel)
                    again = None
                except Exception as failed:
                    again = failed
            if not fault(frame, kernel, site, exc, FINDING, again):
                raise  # from outside: it reaches the caller as if raised just before the launch
            site = None
        if site is None:
            return original(*args, **kwargs)
        run = original if site.launch is None else site.launch  # rename: the site's own kernel
        push, pop = site.push, site.pop  # read together: another thread's give-up clears both
        if push is None:
            return run(*args, **kwargs)
        # Async exceptions (KeyboardInterrupt from a signal handler) are raised only once a call
        # has returned: one arriving as push() returns is inside this try, and nothing is pushed
        # before it, so the range is closed however the wrapper is left. An Exception arriving
        # so is told from a failing push by kname.faults (push and pop are calls into C, which
        # run no bytecode of their own: not taken again, as each call opens or closes a range).
        try:
            try:
                push()
            except Exception as exc:  # kname's: the launch still runs, unnamed from now on
                if not fault(frame, kernel, site, exc, OPENING, exc):
                    raise  # from outside: no launch, and the range is closed all the same
            return run(*args, **kwargs)
        finally:
            try:
                pop()
            except Exception as exc:
                if not fault(frame, kernel, site, exc, CLOSING, exc):
                    raise  # as a finally that raises: the launch's exception is its context

    return kname_launch


def _outside_launchers(
    kernel_of: Callable[[tuple], Any] | None, original: Callable[..., Any]
) -> Callable[[tuple], Any]:
    """`kernel_of` that answers None (not a launch of its own) inside a KNAME_TARGETS launcher."""
    if kernel_of is None:

        def launched_kernel(args: tuple) -> Any:
            return None if _launchers.running else original

    else:

        def launched_kernel(args: tuple) -> Any:
            return None if _launchers.running else kernel_of(args)

    return launched_kernel


def _running_as_launcher(launcher: Callable[..., Any]) -> Callable[..., Any]:
    """`launcher`, marking its thread as inside a KNAME_TARGETS launcher while it runs."""

    def launcher_running(*args: Any, **kwargs: Any) -> Any:
        outer = _launchers.running
        try:  # set inside the try, restored (not decremented): an interrupt cannot leave it on
            _launchers.running = outer + 1
            return launcher(*args, **kwargs)
        finally:
            _launchers.running = outer

    return launcher_running


# The code every launch wrapper above runs: its frame on the stack marks a launch in progress.
WRAPPER_CODE = next(
    c for c in launch_wrapper.__code__.co_consts if getattr(c, "co_name", "") == "kname_launch"
)


def _caller_of_caller() -> FrameType | None:
    """The frame that called the function calling this, or None (called from C)."""
    return sys._getframe(1).f_back  # no exception to catch: one from outside propagates


def skip_beneath(hook: Callable[..., Any], kinds: dict[int, int]) -> Callable[..., Any]:
    """The twin of SkipBeneath: `hook` itself, whose walk finds a Python wrapper's frame."""
    return hook


def subscript_launch(
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
    method: str,
    key_keyword: str,
    fixed: dict[str, Any],
) -> Callable[[Any, Any], Callable[..., Any]]:
    """The twin of SubscriptLaunch: a `__getitem__` whose `obj[key](*args, **kwargs)` calls
    `obj.<method>(*args, **kwargs, <key_keyword>=key, **fixed)` inside the launch wrapper
    `wrap` makes; its first argument is `obj.<method>`.

    A functools.partial, which has no frame: the wrapper's caller is the user's line itself.
    """

    def call_keyed(bound: Callable[..., Any], key: Any, /, *args: Any, **kwargs: Any) -> Any:
        return bound(*args, **kwargs, **{key_keyword: key}, **fixed)  # a key given twice: TypeError

    launch = wrap(call_keyed)

    def __getitem__(obj: Any, key: Any) -> Callable[..., Any]:
        return functools.partial(launch, getattr(obj, method), key)

    return __getitem__


def base_call(base: type) -> Callable[..., Any]:
    """The twin of BaseCall: `base.__call__` (CPython's slot wrapper)."""
    return base.__call__


def use_direct_call(cls: type) -> None:
    """The twin of use_direct_call: nothing (instances are called through CPython's slot)."""
