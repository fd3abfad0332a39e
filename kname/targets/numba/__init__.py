"""numba-cuda (and the legacy numba.cuda inside numba): `kernel[grid, block](*args)`.

Every launch, `forall` included, goes through `_LaunchConfiguration.__call__` of
`numba.cuda.dispatcher` (stable from numba-cuda 0.10 to 0.30). With numba-cuda installed,
`numba.cuda` is numba-cuda's package. Under NUMBA_ENABLE_CUDASIM=1 the simulator replaces that
dispatcher with its own, so the launch to wrap is `FakeCUDAKernel.__call__`, which also runs
device functions: those are not launches.

KNAME_MODE=rename (numba-cuda >= 0.30): a site launches its own copy of the dispatcher, compiled
under the site's entry name (see kname.targets.numba.rename).
"""

from __future__ import annotations

import sys
from typing import Any

from kname.launch import KernelArg, LaunchSpec
from kname.targets import Library, Target, wraps
from kname.targets.numba.rename import numba_site_launch

SIMULATOR_KERNEL_MODULE = "numba.cuda.simulator.kernel"


# The dispatcher being launched: `args[0]` is the launch configuration.
dispatcher_of = KernelArg(0, "dispatcher")


def dispatcher_name(dispatcher: Any) -> str:
    return dispatcher.py_func.__qualname__


def is_real_dispatcher(module: Any) -> bool:
    """False under NUMBA_ENABLE_CUDASIM=1, where the simulator's dispatcher takes this name."""
    return ".simulator" not in module.__name__


def simulated_kernel_of(args: tuple) -> Any:
    """The FakeCUDAKernel being launched, or None for a device function or a call in a kernel."""
    kernel = args[0]
    if kernel._device or sys.modules[SIMULATOR_KERNEL_MODULE]._kernel_context is not None:
        return None
    return kernel


def simulated_kernel_name(kernel: Any) -> str:
    return kernel.fn.__qualname__


LAUNCH = LaunchSpec("numba", dispatcher_name, dispatcher_of, rename=numba_site_launch)
SIMULATED_LAUNCH = LaunchSpec("numba", simulated_kernel_name, simulated_kernel_of)

LIBRARY = Library(
    name="numba",
    packages=("numba", "numba_cuda"),
    distributions=("numba", "numba-cuda"),
    renaming="renamed per call site (numba-cuda >= 0.30)",
    targets=(
        Target(
            name="numba",
            module="numba.cuda.dispatcher",
            what="_LaunchConfiguration.__call__",
            changes=wraps("_LaunchConfiguration.__call__", LAUNCH, applies=is_real_dispatcher),
        ),
        Target(
            name="numba",
            module=SIMULATOR_KERNEL_MODULE,
            what="FakeCUDAKernel.__call__",
            changes=wraps("FakeCUDAKernel.__call__", SIMULATED_LAUNCH),
        ),
    ),
)
