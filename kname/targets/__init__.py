"""The registry of launch targets: which module to watch, what to wrap, how to name the kernel.

A target is data plus two small functions. Adding a library is one module here and one line in
BUILTIN below. Target modules are imported only when kname is installed, never by `import kname`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """One launch function (or method) to wrap when `module` is imported."""

    name: str  # what KNAME_TARGETS calls it
    module: str  # imported module that holds the launch callable
    qualname: str  # attribute path inside that module, e.g. "_LaunchConfiguration.__call__"
    lib: str  # library name, shown as {lib} and as the NVTX category
    kernel_name: Callable[[Any], str]  # kernel object -> its name, once per call site
    kernel_of: Callable[[tuple], Any] | None = None  # call args -> kernel, None: not a launch
    applies: Callable[[Any], bool] | None = None  # module -> False: quietly not this one
    # Instead of wrapping `qualname`: module -> undo callables. The target makes its own changes
    # (a subclass in place of an immutable type, a library's launch hook); uninstall() calls the
    # undos, newest first, and they put the original objects back.
    install: Callable[[Any], Iterable[Callable[[], None]]] | None = None
    # KNAME_MODE=rename: (kernel, Site) -> a callable taking the wrapped callable's arguments that
    # launches that site's renamed copy of the kernel instead, or None to launch the original.
    rename: Callable[[Any, Any], Callable[..., Any] | None] | None = None


# Built-in target name -> modules that define TARGETS (a tuple of Target).
BUILTIN: dict[str, tuple[str, ...]] = {
    "numba": ("kname.targets.numba_cuda", "kname.targets.numba_cudasim"),
    "cupy": ("kname.targets.cupy",),
    "triton": ("kname.targets.triton",),
    "pycuda": ("kname.targets.pycuda",),
    "cuda_core": ("kname.targets.cuda_core",),
}


def builtin_targets(name: str) -> tuple[Target, ...]:
    """The Target definitions of built-in target `name`."""
    return tuple(
        target for module in BUILTIN[name] for target in importlib.import_module(module).TARGETS
    )


def user_target(entry: str) -> Target:
    """A Target for a `module:qualname` entry of KNAME_TARGETS (already validated)."""
    module, qualname = entry.split(":", 1)
    return Target(
        name=entry,
        module=module,
        qualname=qualname,
        lib=module.split(".", 1)[0],
        kernel_name=lambda _callable: qualname,
    )
