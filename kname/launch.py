"""The per-launch wrapper: the only kname code that runs at every launch.

A plain closure, not a wrapt.FunctionWrapper: the wrapper layer alone cost 0.43 µs per call with
wrapt and 0.08 µs as a closure, and a plain function is still a correct method
descriptor when it replaces `Class.__call__`. Everything it needs is handed to it when it is
made; it never looks up kname's lifecycle. Where the C extension kname._native is in use
(kname._native_choice), it makes the wrapper instead: the same steps in C, for the same objects.

What every launch wrapper keeps (a native one too):
- Switched off: the original is called, nothing else.
- Naming (kernel, call-site look-up, count) fails with an Exception: said once, that line runs
  unnamed from then on, this launch runs. Any other exception (KeyboardInterrupt) propagates,
  and no range was opened.
- Once push() is called, pop() is called exactly once as the wrapper is left, however it is
  left: the launch's return or exception, an async exception at any point, a failing push.
- The launch's result and exception reach the caller unchanged; a failing push or pop is said
  once and unnames that line from then on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from kname import _native_choice, callsite
from kname._watched import Watched
from kname.patching import mark_wrapper


class Switch(Watched):
    """Whether the wrappers of one install() name launches; read by every wrapper, every launch.

    A Watched object: every change is told to the C wrapper, which remembers that it is on.
    """

    __slots__ = ("on",)

    def __init__(self, on: bool = True) -> None:
        self.on = on


class KernelArg:
    """A `kernel_of`: the kernel is `args[index]` (or its `attribute`); None when args is shorter.

    The native wrapper reads it in C, with no call into Python at each launch.
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


@dataclass(frozen=True)
class LaunchSpec:
    """How to name the launches of one launch callable.

    `kernel_of(args)` returns the launched kernel object, or None when the call is not a launch
    (a device function called from a kernel in the simulator); without it, the wrapped callable
    itself is the kernel. `kernel_name(kernel)` is asked once per new call site. `rename(kernel,
    site)`, used under KNAME_MODE=rename only, is asked once per new site for a callable that
    launches that site's renamed kernel in place of the original, with the same arguments
    (None: the original).
    """

    lib: str
    kernel_name: Callable[[Any], str]
    kernel_of: Callable[[tuple], Any] | None = None
    rename: Callable[[Any, callsite.Site], Callable[..., Any] | None] | None = None


def make_launch_wrapper(
    original: Callable[..., Any], spec: LaunchSpec, switch: Switch
) -> Callable[..., Any]:
    """Wrap `original` so each call runs inside an NVTX range named after its call site."""
    native = _native_choice.native_module()
    if native is not None:
        return _native_wrapper(native, original, spec, switch)
    lib, kernel_name, kernel_of, rename = spec.lib, spec.kernel_name, spec.kernel_of, spec.rename
    sites = callsite.sites
    resolve = callsite.resolve
    pass_through = callsite.pass_through
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
                    frame = None
                if frame is not None:
                    site = sites.get((id(frame.f_code), frame.f_lasti, id(kernel)))
                    if site is None:
                        site = resolve(frame, kernel, id(kernel), kernel_name, lib, rename)
                    if site is not None:
                        next(site.counter)
        except Exception as exc:  # kname's own failure: this launch runs unnamed, counted
            kernel = locals().get("kernel")  # unbound if kernel_of itself failed
            pass_through(frame or _caller_of_caller(), kernel, site, exc, FINDING)
            site = None
        if site is None:
            return original(*args, **kwargs)
        run = original if site.launch is None else site.launch  # rename: the site's own kernel
        push, pop = site.push, site.pop  # read together: another thread's give-up clears both
        if push is None:
            return run(*args, **kwargs)
        # Async exceptions (KeyboardInterrupt from a signal handler) are raised only once a call
        # has returned: one arriving as push() returns is inside this try, and nothing is pushed
        # before it, so the range is closed however the wrapper is left.
        try:
            try:
                push()
            except Exception as exc:  # the launch still runs, unnamed from now on
                pass_through(frame, kernel, site, exc, "opening a launch's NVTX range")
            return run(*args, **kwargs)
        finally:
            try:
                pop()
            except Exception as exc:
                pass_through(frame, kernel, site, exc, "closing a launch's NVTX range")

    callsite.register_wrapper_code(kname_launch.__code__)
    mark_wrapper(kname_launch, original)
    if getattr(original, "__module__", None) is None:
        kname_launch.__module__ = __name__
    return kname_launch


FINDING = "finding a launch's name"


def _caller_of_caller() -> FrameType | None:
    """The frame that called the function calling this, or None (called from C)."""
    try:
        return sys._getframe(2)
    except ValueError:
        return None


def _native_wrapper(native, original, spec, switch):
    """kname._native's LaunchWrapper: kname_launch's steps in C, with the same callbacks."""
    lib, kernel_name, kernel_of, rename = spec.lib, spec.kernel_name, spec.kernel_of, spec.rename
    resolve = callsite.resolve

    def resolve_site(frame, kernel):
        return resolve(frame, kernel, id(kernel), kernel_name, lib, rename)

    if isinstance(kernel_of, KernelArg):
        kernel = (kernel_of.index, kernel_of.attribute)  # read in C
    else:
        kernel = kernel_of
    wrapper = native.LaunchWrapper(
        original, kernel, switch, callsite.sites, resolve_site, callsite.pass_through,
        callsite._kinds,
    )  # fmt: skip
    mark_wrapper(wrapper, original)
    if getattr(original, "__module__", None) is None:
        wrapper.__module__ = __name__
    return wrapper
