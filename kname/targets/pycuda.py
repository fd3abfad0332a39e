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
from types import ModuleType
from typing import Any

from kname.launch import KernelArg, LaunchSpec
from kname.patching import Change, mark_wrapper
from kname.targets import Library, Options, Target, wrap_attribute, wraps

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


def note_names(get_function: Any) -> Any:
    """Module.get_function, noting each Function's name on it (not a launch)."""

    def named_get_function(self, name):
        function = get_function(self, name)
        # Without an instance dict the Function stays "pycuda_function".
        with contextlib.suppress(AttributeError, TypeError):
            setattr(function, NAME_ATTRIBUTE, name.decode() if isinstance(name, bytes) else name)
        return function

    return mark_wrapper(named_get_function, get_function)


def get_function_changes(module: ModuleType, options: Options) -> list[Change]:
    return wrap_attribute(module, "Module.get_function", note_names)


LAUNCH = LaunchSpec(LIB, kernel_name, KernelArg(0))

LIBRARY = Library(
    name="pycuda",
    packages=("pycuda",),
    distributions=("pycuda",),
    targets=(
        Target("pycuda", "pycuda.driver", "Module.get_function", get_function_changes),
        *(
            Target(
                "pycuda", "pycuda.driver", f"Function.{launch}", wraps(f"Function.{launch}", LAUNCH)
            )
            for launch in LAUNCHES
        ),
    ),
)
