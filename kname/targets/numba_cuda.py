"""numba-cuda (and the legacy numba.cuda inside numba): `kernel[grid, block](*args)`.

Every launch, `forall` included, goes through `_LaunchConfiguration.__call__` (stable from
numba-cuda 0.10 to 0.30). With numba-cuda installed, `numba.cuda` is numba-cuda's package.
"""

from __future__ import annotations

from typing import Any

from kname.rename import numba_site_launch
from kname.targets import Target


def kernel_of(args: tuple) -> Any:
    """The dispatcher being launched; `args[0]` is the launch configuration."""
    return args[0].dispatcher


def kernel_name(dispatcher: Any) -> str:
    return dispatcher.py_func.__qualname__


def is_real_dispatcher(module: Any) -> bool:
    """False under NUMBA_ENABLE_CUDASIM=1, where the simulator's dispatcher takes this name."""
    return ".simulator" not in module.__name__


TARGETS = (
    Target(
        name="numba",
        module="numba.cuda.dispatcher",
        qualname="_LaunchConfiguration.__call__",
        lib="numba",
        kernel_name=kernel_name,
        kernel_of=kernel_of,
        applies=is_real_dispatcher,
        rename=numba_site_launch,  # KNAME_MODE=rename: per-site kernels, see kname.rename
    ),
)
