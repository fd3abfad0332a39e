"""numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): kernels run on the CPU.

The simulator replaces numba.cuda's dispatcher with its own, so the launch to wrap is
`FakeCUDAKernel.__call__`, which also runs device functions: those are not launches.
"""

from __future__ import annotations

import sys
from typing import Any

from kname.targets import Target

SIMULATOR_KERNEL_MODULE = "numba.cuda.simulator.kernel"


def kernel_of(args: tuple) -> Any:
    """The FakeCUDAKernel being launched, or None for a device function or a call in a kernel."""
    kernel = args[0]
    if kernel._device or sys.modules[SIMULATOR_KERNEL_MODULE]._kernel_context is not None:
        return None
    return kernel


def kernel_name(kernel: Any) -> str:
    return kernel.fn.__qualname__


TARGETS = (
    Target(
        name="numba",
        module=SIMULATOR_KERNEL_MODULE,
        qualname="FakeCUDAKernel.__call__",
        lib="numba",
        kernel_name=kernel_name,
        kernel_of=kernel_of,
    ),
)
