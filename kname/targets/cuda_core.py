"""cuda.core (cuda-python): the module-level `launch(stream, config, kernel, *args)`.

`launch` is a Cython function in `cuda.core._launcher` (`cuda.core.experimental._launcher` before
cuda-core 0.5), re-exported by `cuda.core` and bound by name in modules that did
`from cuda.core import launch`: numba-cuda's dispatcher is one. When `_launcher` is imported,
kname binds one wrapper under that name in `_launcher` and in those modules (the ones already
imported; later importers pick the wrapper up from `cuda.core`).

A numba-cuda launch reaches this `launch` from inside numba's own launch, which kname already
names. Where kname wraps numba's launches, numba's dispatcher keeps cuda.core's own `launch`, so
the inner call costs nothing. Anywhere else, a wrapped `launch` called beneath another kname
launch finds that launch's wrapper frame before any user frame and emits no range: each kernel
sits in exactly one kname range either way.

The kernel's name comes from the driver (`cuKernelGetName`, CUDA 12.3+), once per kernel object;
cuda-core's Kernel has no name attribute.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname.launch import make_launch_wrapper
from kname.targets import Target

LIB = "cuda.core"
LAUNCHER_MODULES = ("cuda.core._launcher", "cuda.core.experimental._launcher")
# Modules that bind `launch` by name: the package (re-export) and known importers.
REBINDERS = ("cuda.core", "cuda.core.experimental", "numba.cuda.dispatcher")
MAX_NAMES = 4096

_names: dict[Any, str] = {}  # Kernel -> name (Kernel hashes and compares by its handle)
_wrappers: dict[int, tuple[Any, Any]] = {}  # id(original launch) -> (original, its wrapper)


def kernel_of(args: tuple) -> Any:
    """The Kernel being launched: `launch(stream, config, kernel, *kernel_args)`."""
    return args[2] if len(args) > 2 else None


def kernel_name(kernel: Any) -> str:
    """The kernel's name as the driver knows it (mangled for C++), asked once per kernel."""
    try:
        name = _names.get(kernel)
    except TypeError:  # not hashable: not a cuda.core Kernel
        return type(kernel).__name__
    if name is None:
        name = _driver_name(kernel) or "kernel"
        if len(_names) >= MAX_NAMES:
            _names.clear()
        _names[kernel] = name
    return name


def _driver_name(kernel: Any) -> str | None:
    try:
        from cuda.bindings import driver

        error, name = driver.cuKernelGetName(kernel.handle)
        if error == driver.CUresult.CUDA_SUCCESS and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no GPU, an old driver or bindings: name it by its type
        pass
    return None


def _wrapper_for(original: Any) -> Any:
    entry = _wrappers.get(id(original))
    if entry is None or entry[0] is not original:
        entry = (original, make_launch_wrapper(original, LIB, kernel_name, kernel_of))
        _wrappers[id(original)] = entry
    return entry[1]


def install(module: ModuleType) -> list[Callable[[], None]]:
    """Bind the named `launch` in `module` and in the rebinding modules already imported."""
    original = vars(module)["launch"]
    if getattr(original, "_kname_wrapper", False):
        return []  # already ours: the hook fired again
    wrapper = _wrapper_for(original)
    homes = (module.__name__, *REBINDERS)
    for home in homes:
        bound = sys.modules.get(home)
        if bound is not None and vars(bound).get("launch") is original:
            bound.launch = wrapper

    def undo() -> None:
        for home in homes:
            bound = sys.modules.get(home)
            if bound is not None and vars(bound).get("launch") is wrapper:
                bound.launch = original

    return [undo]


def install_numba(dispatcher: ModuleType) -> list[Callable[[], None]]:
    """numba-cuda's dispatcher: call cuda.core's own `launch` where numba's launch is named.

    The numba target has wrapped `_LaunchConfiguration.__call__` (it comes first in BUILTIN, and
    its hook runs first); every numba launch passes there, so the inner wrapper would only find
    that it is nested, at a cost per launch.
    """
    configuration = getattr(dispatcher, "_LaunchConfiguration", None)
    numba_launch = vars(configuration).get("__call__") if configuration is not None else None
    wrapper = vars(dispatcher).get("launch")
    if not getattr(numba_launch, "_kname_wrapper", False):
        return []  # numba's launches are not named by kname: cuda.core's wrapper names them
    if not getattr(wrapper, "_kname_wrapper", False):
        return []
    original = wrapper.__wrapped__
    dispatcher.launch = original

    def undo() -> None:
        if vars(dispatcher).get("launch") is original:
            dispatcher.launch = wrapper

    return [undo]


TARGETS = (
    *(
        Target(
            name="cuda_core",
            module=module,
            qualname="launch",
            lib=LIB,
            kernel_name=kernel_name,
            kernel_of=kernel_of,
            install=install,
        )
        for module in LAUNCHER_MODULES
    ),
    Target(
        name="cuda_core",
        module="numba.cuda.dispatcher",
        qualname="launch",
        lib=LIB,
        kernel_name=kernel_name,
        kernel_of=kernel_of,
        install=install_numba,
    ),
)
