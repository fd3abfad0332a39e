"""PyCUDA: `func(*args, block=..., grid=...)` and the prepared calls of `pycuda.driver.Function`.

`pycuda.driver` sets `Function.__call__`, `prepared_call`, `prepared_async_call` and
`prepared_timed_call` (Python functions) on the Boost.Python class `Function` while it is
imported; kname wraps them when that import is done. PyCUDA's own kernels (GPUArray arithmetic,
ElementwiseKernel, ReductionKernel) launch through the same prepared calls, so they are named
after the user line that caused them.

A Function does not know its name, so kname wraps `Module.get_function(name)` (which
`SourceModule.get_function` calls) to note the name on the Function it returns. Functions
obtained before install() are named "pycuda_function".
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kname.targets import Target

LIB = "pycuda"
UNNAMED = "pycuda_function"
LAUNCHES = ("__call__", "prepared_call", "prepared_async_call", "prepared_timed_call")
NAME_ATTRIBUTE = "_kname_name"


def kernel_name(function: Any) -> str:
    # From the instance dict: Function.__getattr__ turns unknown names into driver queries.
    try:
        return vars(function).get(NAME_ATTRIBUTE, UNNAMED)
    except TypeError:  # no instance dict
        return UNNAMED


def install_get_function(module: ModuleType) -> list[Callable[[], None]]:
    """Wrap Module.get_function to note each Function's name on it (not a launch)."""
    owner = module.Module
    original = vars(owner)["get_function"]
    if getattr(original, "_kname_wrapper", False):
        return []

    def get_function(self, name):
        function = original(self, name)
        # Without an instance dict the Function stays "pycuda_function".
        with contextlib.suppress(AttributeError, TypeError):
            setattr(function, NAME_ATTRIBUTE, name.decode() if isinstance(name, bytes) else name)
        return function

    get_function.__wrapped__ = original
    get_function.__name__ = "get_function"
    get_function.__qualname__ = "Module.get_function"
    get_function.__doc__ = getattr(original, "__doc__", None)
    get_function._kname_wrapper = True
    owner.get_function = get_function

    def undo() -> None:
        if vars(owner).get("get_function") is get_function:
            owner.get_function = original

    return [undo]


TARGETS = (
    Target(
        name="pycuda",
        module="pycuda.driver",
        qualname="Module.get_function",
        lib=LIB,
        kernel_name=kernel_name,
        install=install_get_function,
    ),
    *(
        Target(
            name="pycuda",
            module="pycuda.driver",
            qualname=f"Function.{launch}",
            lib=LIB,
            kernel_name=kernel_name,
            kernel_of=operator.itemgetter(0),
        )
        for launch in LAUNCHES
    ),
)
