"""KNAME_MODE=rename for CuPy: ElementwiseKernel and ReductionKernel rebuilt under a site's name.

RawKernel and RawModule are not renamed: their names are the user's own `__global__` symbols, in
the user's source, which kname leaves alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kname._warnings import warn_once
from kname.rename import entry_name
from kname.targets import installed_version, release

MIN_CUPY = (13, 0, 0)
# Where `name` sits among the constructor's positional parameters (CuPy 13 and 14):
# ElementwiseKernel(in_params, out_params, operation, name, ...),
# ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name, ...)
CUPY_NAME_POSITION = {"ElementwiseKernel": 3, "ReductionKernel": 6}
CUPY_ARGS = "_kname_args"  # the slot of kname's subclass holding the constructor's arguments


def cupy_recording_init(base: type) -> Callable[..., Any]:
    """An `__init__` for kname's subclass of `base` that keeps the constructor's arguments.

    Installed in rename mode only. CuPy's kernel objects parse their parameters on construction
    and keep no way back to the arguments; a site's kernel is rebuilt from these.
    """
    init = base.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        setattr(self, CUPY_ARGS, (args, kwargs))

    __init__.__qualname__ = f"{base.__qualname__}.__init__"
    __init__.__doc__ = init.__doc__
    return __init__


def cupy_site_launch(base: type, kernel: Any, site: Any) -> Callable[..., Any] | None:
    """`launch(kernel, *args, **kwargs)`: CuPy's `base.__call__` on `site`'s own kernel, or None.

    The site's kernel is a `base` (CuPy's own class) built from the same arguments as `kernel`,
    with `name=` the site's entry name. CuPy generates the kernel's source with that name in it
    (`extern "C" __global__ void <name>(...)`) and caches compiles by source, so the site's kernel
    compiles once, on its own, at its first launch with each argument types.
    """
    problem = _cupy_support()
    if problem is not None:
        warn_once(
            "rename:cupy",
            f"KNAME_MODE=rename: {problem}; CuPy kernels are named by NVTX ranges only",
        )
        return None
    recorded = getattr(kernel, CUPY_ARGS, None)
    if recorded is None:
        warn_once(
            f"rename:cupy:unrecorded:{base.__name__}",
            f"KNAME_MODE=rename: a CuPy {base.__name__} made outside rename mode (before "
            f"install(), or unpickled) is not renamed; it is named by NVTX ranges only",
        )
        return None
    name = entry_name(site.identifier, (site.kernel, site.name))
    args, kwargs = recorded
    position = CUPY_NAME_POSITION[base.__name__]
    if len(args) > position:
        args = (*args[:position], name, *args[position + 1 :])
    else:
        kwargs = {**kwargs, "name": name}
    variant = base(*args, **kwargs)
    if variant.name != name:
        raise RuntimeError(f"CuPy's {base.__name__} took the name {variant.name!r}")
    call = base.__call__

    def launch_renamed(_kernel, *args, **kwargs):
        return call(variant, *args, **kwargs)

    launch_renamed.kernel = variant  # for inspection: its name, parameters, compiled code
    return launch_renamed


@functools.cache
def _cupy_support() -> str | None:
    """None, or why this CuPy's kernels cannot be renamed."""
    version = installed_version("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"))
    if version is not None and release(version) < MIN_CUPY:
        minimum = ".".join(map(str, MIN_CUPY))
        return f"renaming needs CuPy >= {minimum} (this is {version})"
    return None
