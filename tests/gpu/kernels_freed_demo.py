"""On a real GPU: kernels launched once and dropped are freed with kname on as with it off.

    python tests/gpu/kernels_freed_demo.py off
    PYTHONPATH=. python tests/gpu/kernels_freed_demo.py on

Prints one `FREED <library> <freed>/<made>` line per library (numba-cuda dispatchers, CuPy
RawKernel and ElementwiseKernel), then `SITES <cached sites>` and `LAUNCHES <counted>`. With kname
on, every FREED line must equal the run with kname off, and LAUNCHES must be 60.
"""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still calls it; numpy 2.5 removed it
    np.row_stack = np.vstack

ON = sys.argv[1:] == ["on"]
if ON:
    import kname

    kname.install()

from numba import cuda  # noqa: E402 - after kname.install(), as a program would

MADE = 20


def freed(refs: list[weakref.ref]) -> int:
    gc.collect()
    return sum(ref() is None for ref in refs)


def freed_cupy(kind: type, names: set[str]) -> int:
    """CuPy's own kernel classes take no weak references: count the live ones by name."""
    gc.collect()
    alive = sum(
        1 for o in gc.get_objects() if isinstance(o, kind) and getattr(o, "name", None) in names
    )
    return len(names) - alive


def numba_kernels() -> list[weakref.ref]:
    out = cuda.device_array(256)
    refs = []
    for _ in range(MADE):

        @cuda.jit
        def fill(a):
            j = cuda.grid(1)
            if j < a.size:
                a[j] = j

        fill.payload = np.ones(2 * 1024 * 1024)  # 16 MB held by the dispatcher
        fill[1, 256](out)
        cuda.synchronize()
        refs.append(weakref.ref(fill))
        del fill
    return refs


def cupy_kernels(kind: str) -> int:
    import cupy

    out = cupy.zeros(256, dtype=cupy.float32)
    names = set()
    for i in range(MADE):
        if kind == "raw":
            kernel = cupy.RawKernel(
                f'extern "C" __global__ void fill{i}(float* a) {{ a[threadIdx.x] = {i}; }}',
                f"fill{i}",
            )
            kernel((1,), (256,), (out,))
        else:
            kernel = cupy.ElementwiseKernel("", "float32 a", f"a = {i}", f"fill{i}")
            kernel(out)
        cupy.cuda.runtime.deviceSynchronize()
        names.add(kernel.name)
        del kernel
    kind_of = cupy.RawKernel if kind == "raw" else cupy.ElementwiseKernel
    return freed_cupy(kind_of, names)


print(f"FREED numba {freed(numba_kernels())}/{MADE}", flush=True)
print(f"FREED cupy-raw {cupy_kernels('raw')}/{MADE}", flush=True)
print(f"FREED cupy-elementwise {cupy_kernels('elementwise')}/{MADE}", flush=True)
if ON:
    from kname import callsite

    print(f"SITES {len(callsite.sites)}")
    print(f"LAUNCHES {sum(kname.names().values())}")
