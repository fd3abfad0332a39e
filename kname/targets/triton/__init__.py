"""Triton: `kernel[grid](*args)`, autotuned kernels and launches of compiled kernels.

`kernel[grid]` (KernelInterface.__getitem__, shared by JITFunction, Autotuner and Heuristics)
returns Triton's own launcher, a lambda calling `kernel.run(*args, grid=grid, warmup=False)`.
kname puts a `__getitem__` in its place that returns the same call bound to kname's launch
wrapper, so the wrapper's caller is the user's line and a cached launch costs a key and a dict
hit: the hot path's SubscriptLaunch (kname.hotpath; in C, no Python frame between the user's line
and `run`, where Triton's own path has two; its Python twin, a functools.partial). The range
covers `run`: the launch, and compilation at the first launch of a specialisation. disable()
puts Triton's `__getitem__` back.

Every other launch (a compiled kernel's `compiled[grid](...)`, `kernel.run(...)` called
directly, launchers of other libraries such as PyTorch Inductor's) is named through Triton 3.4+'s
launch hooks: `triton.knobs.runtime.launch_enter_hook` and `launch_exit_hook` (HookChains) are
called around every launch by its C launcher, with the launch metadata (the kernel's `name`).
kname adds its own pair to those chains, next to any already there (Proton's), and removes only
its own on uninstall. The enter hook finds the call site by walking up from the launcher's Python
caller (Triton's frames are library frames) and pushes the range; the exit hook pops it. Beneath
kname's `kernel[grid]` launch the hooks add nothing (in C, a guard returns at once; on the
Python path the walk finds the wrapper's frame). If a
launch fails between the two hooks, Triton does not call the exit hook: the range left open is
closed at the thread's next Triton launch.

The C types above (SubscriptLaunch and the hooks' guard, SkipBeneath) are in _native_triton.c,
beside this file, built into kname._native (LIBRARY.c_sources names it).

Older Triton (no HookChain): `JITFunction.run` is wrapped as well, except warm-up calls
(`warmup=True` compiles without launching), and the kernel's name is its function's name.

KNAME_MODE=rename (see kname.targets.triton.rename): `JITFunction.run` is wrapped instead of
`__getitem__` (the launch hooks run from C, too late to change the kernel), and a launch from a
new call site makes the site's clone of the JITFunction, whose compiled kernel's entry name is
the site's entry name; the site launches through the clone from then on (`clone.run(*args,
grid=..., **kwargs)`). The wrapper names the launch; the hooks, beneath it, see a launch already
named and add no range. Warm-up calls compile the user's own kernel, as without kname.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname import callsite
from kname._warnings import report_fault
from kname.launch import KernelArg, LaunchSpec, Switch
from kname.patching import Change, HookPatch, Patch, is_wrapper, mark_wrapper
from kname.targets import Library, Options, Target, inside_launcher
from kname.targets.triton.rename import triton_site_launch

LIB = "triton"
UNNAMED = "triton_kernel"

_open = threading.local()  # .sites: the ranges this thread's enter hook opened, innermost last


def metadata_name(metadata: Any) -> str:
    """The kernel's name from the launch metadata (a LazyDict; its `.data` needs no evaluation)."""
    data = getattr(metadata, "data", metadata)
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) and name else UNNAMED


def launch_hooks(
    switch: Switch, nesting: bool = False
) -> tuple[Callable[[Any], None], Callable[[Any], None]]:
    """The enter and exit hooks of one install(), which name launches while `switch` is on
    (and, with `nesting`, outside KNAME_TARGETS launchers: see kname.targets.Options)."""

    def enter_hook(metadata: Any) -> None:
        """Triton calls this just before a launch: push the range of the launch's call site."""
        stack = _thread_stack()
        while stack:  # a launch that failed after its enter hook: close its range now
            site = stack.pop()
            if site is not None:
                _pop(site)
        if not switch.on or (nesting and inside_launcher()):
            return
        stack.append(_push(sys._getframe(1), metadata))

    def exit_hook(metadata: Any) -> None:
        """Triton calls this just after a launch: pop the range its enter hook pushed."""
        stack = getattr(_open, "sites", None)
        if stack:
            site = stack.pop()
            if site is not None:
                _pop(site)

    return enter_hook, exit_hook


def _thread_stack() -> list[Any]:
    stack = getattr(_open, "sites", None)
    if stack is None:
        stack = _open.sites = []
    return stack


def _push(frame: Any, metadata: Any) -> Any:
    """The site whose range is now open, or None. Never raises: that would stop the launch."""
    try:
        name = metadata_name(metadata)
        # The hook's caller is Triton's HookChain, the same frame for every launch: there is
        # no fast key here, the walk to the user frame is the look-up (cached per code object).
        site = callsite.resolve(frame, name, name, name, LIB)
        if site is None:
            return None
        next(site.counter)
        if site.push is None:
            return None
        site.push()
        return site
    except Exception as exc:
        report_fault("finding or emitting a Triton launch's name", exc)
        return None


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


def hook_changes(knobs: ModuleType, options: Options) -> list[Change]:
    """kname's enter/exit hooks in Triton's chains, beside any already there (Proton's)."""
    if not has_hook_chains(knobs):
        return []
    enter_hook, exit_hook = launch_hooks(options.switch, options.nesting)
    # Beneath kname's own native `kernel[grid]` launch, which names it, neither hook is called
    # (a C guard decides, with callsite's decisions per code object): ranges left open by failed
    # launches wait for the next hook-named one. On the Python path the hooks' walk finds the
    # wrapper's frame.
    skip_beneath = options.hot_path.skip_beneath
    enter_hook, exit_hook = (skip_beneath(h, callsite._kinds) for h in (enter_hook, exit_hook))
    return [
        HookPatch(knobs.runtime.launch_enter_hook, enter_hook),
        HookPatch(knobs.runtime.launch_exit_hook, exit_hook),
    ]


def jit_kernel_name(jit_function: Any) -> str:
    fn = getattr(jit_function, "fn", None)
    return getattr(fn, "__name__", None) or getattr(jit_function, "__name__", UNNAMED)


RUN_LAUNCH = LaunchSpec(LIB, jit_kernel_name, KernelArg(0), rename=triton_site_launch)
# `kernel[grid]`: the wrapper's first argument is the bound `kernel.run`.
BOUND_RUN_LAUNCH = LaunchSpec(LIB, jit_kernel_name, KernelArg(0, "__self__"))


def getitem_changes(module: ModuleType, options: Options) -> list[Change]:
    """`kernel[grid]` returns Triton's launch call bound to kname's launch wrapper.

    Not in rename mode, where the wrapper of JITFunction.run names (and renames) those launches.
    """
    owner = getattr(module, "KernelInterface", None)
    original = vars(owner).get("__getitem__") if isinstance(owner, type) else None
    if options.renaming or original is None or is_wrapper(original):
        return []
    # `kernel[grid](*args)` calls `kernel.run(*args, grid=grid, warmup=False)`, as Triton's
    # lambda does (`grid=` given twice fails alike), in a launch wrapper whose caller is the
    # user's line itself.
    wrap = functools.partial(options.wrapper, spec=BOUND_RUN_LAUNCH)
    __getitem__ = options.hot_path.subscript_launch(wrap, "run", "grid", {"warmup": False})
    return [Patch(owner, "__getitem__", mark_wrapper(__getitem__, original))]


def run_changes(module: ModuleType, options: Options) -> list[Change]:
    """Older Triton (no hook chains), or rename mode: wrap JITFunction.run.

    Warm-up (compile-only) calls pass straight on. In rename mode, a launch from a new call site
    asks triton_site_launch for the site's clone, and the site's launches run through it.
    """
    if not options.renaming and has_hook_chains(sys.modules.get("triton.knobs")):
        return []
    owner = module.JITFunction
    original = vars(owner)["run"]
    if is_wrapper(original):
        return []
    named = options.wrapper(original, RUN_LAUNCH)

    def run(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return original(self, *args, **kwargs)
        return named(self, *args, **kwargs)

    return [Patch(owner, "run", mark_wrapper(run, original))]


LIBRARY = Library(
    name="triton",
    packages=("triton",),
    distributions=("triton",),
    renaming="@triton.jit kernels renamed per call site (Triton >= 3.4)",
    c_sources=("_native_triton.c",),
    targets=(
        Target("triton", "triton.knobs", "runtime.launch_enter_hook", hook_changes),
        Target("triton", "triton.runtime.jit", "KernelInterface.__getitem__", getitem_changes),
        Target("triton", "triton.runtime.jit", "JITFunction.run", run_changes),
    ),
)
