"""The per-launch wrapper: the only kname code that runs at every launch.

A plain closure, not a wrapt.FunctionWrapper: the wrapper layer alone cost 0.43 µs per call with
wrapt and 0.08 µs as a closure (DESIGN.md), and a plain function is still a correct method
descriptor when it replaces `Class.__call__`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from kname import callsite
from kname._warnings import report_fault

_enabled = True


def enable() -> None:
    """Set the switch every wrapper checks (kname.enable() also puts the wrappers back)."""
    global _enabled
    _enabled = True


def disable() -> None:
    """Clear the switch every wrapper checks (kname.disable() also takes the wrappers out)."""
    global _enabled
    _enabled = False


def is_enabled() -> bool:
    """Whether launches are being named right now (installed or not)."""
    return _enabled


def make_launch_wrapper(
    original: Callable[..., Any],
    lib: str,
    kernel_name: Callable[[Any], str],
    kernel_of: Callable[[tuple], Any] | None = None,
    rename: Callable[[Any, callsite.Site], Callable[..., Any] | None] | None = None,
) -> Callable[..., Any]:
    """Wrap `original` so each call runs inside an NVTX range named after its call site.

    `kernel_of(args)` returns the launched kernel object, or None when the call is not a launch
    (a device function called from a kernel in the simulator); without it, `original` itself is
    the kernel. `kernel_name(kernel)` is asked once per new call site. Under KNAME_MODE=rename
    only, `rename(kernel, site)` is asked once per new site for a callable that launches that
    site's renamed kernel in place of `original`, with the same arguments (None: `original`).
    """
    if rename is not None and not _renaming():
        rename = None
    sites = callsite.sites
    resolve = callsite.resolve
    getframe = sys._getframe

    def give_up(frame, args):
        """After a fault in kname: launches from this line run as if kname were off (counted)."""
        with contextlib.suppress(Exception):
            kernel = original if kernel_of is None else kernel_of(args)
            if kernel is not None:
                callsite.pass_through(frame, kernel)

    def kname_launch(*args, **kwargs):
        if not _enabled:
            return original(*args, **kwargs)
        push = None
        run = original
        try:
            kernel = original if kernel_of is None else kernel_of(args)
            if kernel is not None:
                frame = getframe(1)
                site = sites.get((id(frame.f_code), frame.f_lasti, id(kernel)))
                if site is None:
                    site = resolve(frame, kernel, id(kernel), kernel_name, lib, rename)
                if site is not None:
                    next(site.counter)
                    if site.launch is not None:  # KNAME_MODE=rename: the site's own kernel
                        run = site.launch
                    push = site.push
                    if push is not None:
                        push()
        except Exception as exc:  # kname's own failure: this launch runs unnamed
            report_fault("finding or emitting a launch's name", exc)
            give_up(getframe(1), args)
            push = None
        if push is None:
            return run(*args, **kwargs)
        try:
            return run(*args, **kwargs)
        finally:
            try:
                site.pop()
            except Exception as exc:
                report_fault("closing a launch's NVTX range", exc)
                give_up(getframe(1), args)

    callsite.register_wrapper_code(kname_launch.__code__)
    kname_launch.__wrapped__ = original
    kname_launch.__module__ = getattr(original, "__module__", __name__)
    kname_launch.__name__ = getattr(original, "__name__", "kname_launch")
    kname_launch.__qualname__ = getattr(original, "__qualname__", "kname_launch")
    kname_launch.__doc__ = getattr(original, "__doc__", None)
    kname_launch._kname_wrapper = True
    return kname_launch


def _renaming() -> bool:
    """Whether install() read KNAME_MODE=rename."""
    from kname import hooks  # deferred: hooks imports this module

    config = hooks.current_config()
    return config is not None and config.mode == "rename"
