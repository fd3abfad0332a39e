"""The registry of launch targets: which module to watch, what to wrap, how to name the kernel.

A target is data plus two small functions. Adding a library is one module here and one line in
BUILTIN below. Target modules are imported only when kname is installed, never by `import kname`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
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


# Built-in target name -> modules that define TARGETS (a tuple of Target).
BUILTIN: dict[str, tuple[str, ...]] = {
    "numba": ("kname.targets.numba_cuda", "kname.targets.numba_cudasim"),
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
