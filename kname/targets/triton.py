"""Triton: `kernel[grid](*args)`, autotuned kernels and launches of compiled kernels.

Triton 3.4+ calls `triton.knobs.runtime.launch_enter_hook` and `launch_exit_hook` (HookChains)
around every launch, from its C launcher, with the launch metadata (the kernel's `name`). kname
adds its own pair to those chains, next to any already there (Proton's), and removes only its own
on uninstall. The enter hook finds the call site by walking up from the launcher's Python
caller (JITFunction.run and the other Triton frames are library frames) and pushes the range;
the exit hook pops it. The range covers the launch alone, not compilation.

If the launch fails between the two hooks (a bad argument, a launch error), Triton does not call
the exit hook: the range left open is closed at the thread's next Triton launch.

Older Triton (no HookChain): `JITFunction.run` is wrapped instead, except warm-up calls
(`warmup=True` compiles without launching), and the kernel's name is its function's name.

KNAME_MODE=rename (see kname.rename): `JITFunction.run` is wrapped as well (the launch hooks run
from C, too late to change the kernel), and a launch from a new call site makes the site's
clone of the JITFunction, whose compiled kernel's entry name is the site's entry name; the site
launches through the clone from then on (`clone.run(*args, grid=..., **kwargs)`). The wrapper
names the launch; the hooks, beneath it, see a launch already named and add no range. Warm-up
calls compile the user's own kernel, as without kname.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname import callsite, launch, rename
from kname._warnings import report_fault
from kname.targets import Target

LIB = "triton"
UNNAMED = "triton_kernel"

_open = threading.local()  # .sites: the ranges this thread's enter hook opened, innermost last


def metadata_name(metadata: Any) -> str:
    """The kernel's name from the launch metadata (a LazyDict; its `.data` needs no evaluation)."""
    data = getattr(metadata, "data", metadata)
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else UNNAMED


def enter_hook(metadata: Any) -> None:
    """Triton calls this just before a launch: push the range of the launch's call site."""
    stack = getattr(_open, "sites", None)
    if stack is None:
        stack = _open.sites = []
    while stack:  # a launch that failed after its enter hook: close its range now
        site = stack.pop()
        if site is not None:
            _pop(site)
    if not launch.is_enabled():
        return
    site = None
    try:
        name = metadata_name(metadata)
        # The hook's caller is Triton's HookChain, the same frame for every launch: there is
        # no fast key here, the walk to the user frame is the look-up (cached per code object).
        site = callsite.resolve(sys._getframe(1), name, name, name, LIB)
        if site is not None:
            next(site.counter)
            if site.push is not None:
                site.push()
            else:
                site = None
    except Exception as exc:  # an exception here would stop the launch: never let one out
        report_fault("finding or emitting a Triton launch's name", exc)
        site = None
    stack.append(site)


def exit_hook(metadata: Any) -> None:
    """Triton calls this just after a launch: pop the range its enter hook pushed."""
    stack = getattr(_open, "sites", None)
    if stack:
        site = stack.pop()
        if site is not None:
            _pop(site)


def _pop(site: Any) -> None:
    try:
        site.pop()
    except Exception as exc:
        report_fault("closing a Triton launch's NVTX range", exc)


def has_hook_chains(knobs: ModuleType | None) -> bool:
    runtime = getattr(knobs, "runtime", None)
    return all(
        callable(getattr(getattr(runtime, hook, None), "add", None))
        and callable(getattr(getattr(runtime, hook, None), "remove", None))
        for hook in ("launch_enter_hook", "launch_exit_hook")
    )


def install_hooks(knobs: ModuleType) -> list[Callable[[], None]]:
    """Add kname's enter/exit hooks to Triton's chains; the undo removes exactly those."""
    enter_chain = knobs.runtime.launch_enter_hook
    exit_chain = knobs.runtime.launch_exit_hook
    if enter_hook in enter_chain.calls:
        return []  # already added: the hook fired again
    enter_chain.add(enter_hook)
    exit_chain.add(exit_hook)

    def undo() -> None:
        enter_chain.remove(enter_hook)
        exit_chain.remove(exit_hook)

    return [undo]


def jit_kernel_name(jit_function: Any) -> str:
    fn = getattr(jit_function, "fn", None)
    return getattr(fn, "__name__", None) or getattr(jit_function, "__name__", UNNAMED)


def wraps_run(_module: ModuleType) -> bool:
    """Older Triton (no hook chains), or rename mode: JITFunction.run is wrapped."""
    return launch._renaming() or not has_hook_chains(sys.modules.get("triton.knobs"))


def install_run(module: ModuleType) -> list[Callable[[], None]]:
    """Wrap JITFunction.run, passing warm-up (compile-only) calls straight on.

    In rename mode, a launch from a new call site asks rename.triton_site_launch for the site's
    clone, and the site's launches run through it.
    """
    owner = module.JITFunction
    original = vars(owner)["run"]
    if getattr(original, "_kname_wrapper", False):
        return []
    named = launch.make_launch_wrapper(
        original, LIB, jit_kernel_name, operator.itemgetter(0), rename.triton_site_launch
    )

    def run(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        return named(self, *args, **kwargs)

    run.__wrapped__ = original
    run.__name__, run.__qualname__, run.__doc__ = "run", original.__qualname__, original.__doc__
    run._kname_wrapper = True
    owner.run = run

    def undo() -> None:
        if vars(owner).get("run") is run:
            owner.run = original

    return [undo]


TARGETS = (
    Target(
        name="triton",
        module="triton.knobs",
        qualname="runtime.launch_enter_hook",
        lib=LIB,
        kernel_name=metadata_name,
        applies=has_hook_chains,
        install=install_hooks,
    ),
    Target(
        name="triton",
        module="triton.runtime.jit",
        qualname="JITFunction.run",
        lib=LIB,
        kernel_name=jit_kernel_name,
        applies=wraps_run,
        install=install_run,
    ),
)
