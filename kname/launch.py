"""The per-launch wrapper: the only kname code that runs at every launch.

make_launch_wrapper hands a launch callable, with what naming it needs from kname.callsite, to
the hot path in effect (kname.hotpath): kname._native's LaunchWrapper in C, or its Python twin,
a plain closure (kname.pyhotpath.launch_wrapper). The closure, not a wrapt.FunctionWrapper: the
wrapper layer alone cost 0.43 µs per call with wrapt and 0.08 µs as a closure, and a plain
function is still a correct method descriptor when it replaces `Class.__call__`. Everything a
wrapper needs is handed to it when it is made; it never looks up kname's lifecycle.

What every launch wrapper keeps (a native one too):
- Switched off: the original is called, nothing else.
- Naming (kernel, call-site look-up, count) fails with an Exception of kname's own (it fails
  again when taken once more; kname.faults): said once, that line runs unnamed from then on,
  this launch runs. An exception raised into it from outside (a signal handler's TimeoutError,
  one another thread sent) propagates before the launch, as if raised just before it, and the
  line keeps its name; so does any BaseException (KeyboardInterrupt). No range was opened.
- Once push() is called, pop() is called exactly once as the wrapper is left, however it is
  left: the launch's return or exception, an async exception at any point, a failing push.
- The launch's result and exception reach the caller unchanged; a push or pop failing by
  kname's fault is said once and unnames that line from then on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from kname import callsite, hotpath, pyhotpath, site_faults
from kname._watched import Watched
from kname.patching import mark_wrapper
from kname.pyhotpath import LAUNCHER, UNNAMED_IN_LAUNCHERS, KernelArg

__all__ = [
    "LAUNCHER", "UNNAMED_IN_LAUNCHERS", "KernelArg", "LaunchSpec", "Switch", "make_launch_wrapper",
]  # fmt: skip

# The Python wrapper's frame on the stack marks a launch in progress: callsite's walk stops there.
callsite.register_wrapper_code(pyhotpath.WRAPPER_CODE)


class Switch(Watched):
    """Whether the wrappers of one install() name launches; read by every wrapper, every launch.

    A Watched object: every change is told to the C wrapper, which remembers that it is on.
    """

    __slots__ = ("on",)

    def __init__(self, on: bool = True) -> None:
        self.on = on


class LaunchSpec(NamedTuple):
    """How to name the launches of one launch callable (a NamedTuple: no dataclass is made at
    start-up).

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
    original: Callable[..., Any],
    spec: LaunchSpec,
    switch: Switch,
    hot_path: hotpath.HotPath | None = None,
    launchers: int = 0,
) -> Callable[..., Any]:
    """Wrap `original` so each call runs inside an NVTX range named after its call site, on
    `hot_path` (default: the one in effect). `launchers`: UNNAMED_IN_LAUNCHERS (a launch inside a
    KNAME_TARGETS launcher is not one of its own), with LAUNCHER for a launcher's own wrapper."""
    hot_path = hotpath.current() if hot_path is None else hot_path
    lib, kernel_name, kernel_of, rename = spec.lib, spec.kernel_name, spec.kernel_of, spec.rename
    resolve = callsite.resolve

    def resolve_site(frame, kernel):
        return resolve(frame, kernel, id(kernel), kernel_name, lib, rename)

    kernel: Any = kernel_of
    if isinstance(kernel_of, KernelArg):
        kernel = (kernel_of.index, kernel_of.attribute)  # read in C, with no call
    wrapper = hot_path.launch_wrapper(
        original, kernel, switch, callsite.sites, resolve_site, site_faults.pass_through,
        callsite._kinds, launchers, callsite.NativeMiss(kernel_name, lib, rename),
    )  # fmt: skip
    mark_wrapper(wrapper, original)
    if getattr(original, "__module__", None) is None:
        wrapper.__module__ = __name__
    return wrapper
