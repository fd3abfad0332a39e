"""kname demo: numba kernels launched from several places, each named after its call site.

    KNAME=1 KNAME_SKIP=demo_launchers python examples/demo.py [--steps N]

Runs on the GPU when there is one, else on numba's CUDA simulator (on the CPU). `--steps` (3 by
default) is how many times `step` runs: the README's CI check compares two runs that differ in it.
"""

import argparse
import ctypes
import os
import sys


def gpu_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# The simulator must be chosen before numba is imported.
if not gpu_present():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import numpy as np  # noqa: E402
from demo_launchers import launch_1d, zeros_like  # noqa: E402
from numba import cuda  # noqa: E402

import kname  # noqa: E402


@cuda.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def scale(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] *= a


def step(x, y):
    tmp, out = zeros_like(x), zeros_like(x)
    axpy[1, 64](tmp, 2.0, x, y)  # one line ...
    axpy[1, 64](out, 0.5, tmp, y)  # ... and the next: two different names
    launch_1d(scale, out, 3.0)  # through the helper: named after this line, not the helper
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="numba kernels launched from several lines")
    parser.add_argument("--steps", type=int, default=3, help="times step() runs (default 3)")
    steps = max(1, parser.parse_args().steps)
    x = np.arange(64, dtype=np.float64)
    y = np.ones(64)
    for _ in range(steps):
        out = step(x, y)
    scale.forall(out.size)(out, 0.5)  # forall: named after this line, not numba's ForAll
    expected = ((2.0 * x + y) * 0.5 + y) * 3.0 * 0.5
    assert np.array_equal(out, expected), "the kernels computed something else"

    where = "CUDA simulator (no GPU found)" if os.environ.get("NUMBA_ENABLE_CUDASIM") else "GPU"
    print(f"kname demo on the {where}: {sum(kname.names().values())} launches")
    if not kname.is_installed():
        print(why_off())
        return 1
    print(f"{'launches':>8}  call-site name (the NVTX range around each launch)")
    for name, launches in kname.names().items():
        print(f"{launches:>8}  {name}")
    return 0


def why_off() -> str:
    """Why kname named nothing: the switch is off, or it is on but kname never started."""
    from kname.config import KNAME, switch_state

    where, value, on = switch_state()
    if not on:
        return "kname is off: run with KNAME=1 (see the README) to see the names"
    setting = f"{where}={value}" if where == KNAME else where
    if getattr(sys, "_kname_started", False):  # started, and said on stderr why it named nothing
        return f"kname is on ({setting}) but did not install: see its line on stderr"
    # The switch is read at start-up by kname.pth in site-packages, which an editable install
    # (pip install -e) does not write.
    return (
        f"kname did not start although {setting}: its start-up gate (kname.pth) was not found, "
        "as after `pip install -e`; `kname run -- python examples/demo.py` or a regular "
        "`pip install .` starts it"
    )


if __name__ == "__main__":
    sys.exit(main())
