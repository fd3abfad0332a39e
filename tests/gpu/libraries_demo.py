"""GPU program: numba-cuda, CuPy, Triton, cuda.core and PyCUDA kernels, each from its own line.

Run on a machine with a CUDA GPU, from the repository root:

    KNAME=1 ncu --nvtx --print-nvtx-rename kernel --metrics gpu__time_duration.sum \\
        python tests/gpu/libraries_demo.py

(without the kname wheel installed, `PYTHONPATH=.` instead of `KNAME=1`: the program installs
kname itself when the start-up gate did not). Every kernel should appear under the name of the
line marked `# site: NAME` below, and no kernel under two kname ranges. The program prints
`kname.names()`, then one line per marked site: `SITE <marker> <line> <name> <launches>`, and
`MISSING <marker> <line>` for a site that was not named. A library that is not installed is
skipped (`SKIP <lib>: <reason>`); one that fails prints `FAIL <lib>: <error>`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# numba-cuda 0.30 calls numpy.row_stack, which numpy 2.5 removed: alias it here, in this program
# only (never inside kname), before numba is imported.
import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

import kname

if not kname.is_installed():
    kname.install()

N = 1 << 12
RAW_SOURCE = r"""
extern "C" __global__ void scale_raw(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""
CORE_SOURCE = r"""
extern "C" __global__ void add_core(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def run_numba() -> None:
    from numba import cuda

    @cuda.jit
    def axpy_numba(out, a, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + out[i]

    x = cuda.to_device(np.ones(N, dtype=np.float32))
    out = cuda.device_array_like(x)
    axpy_numba[N // 256, 256](out, 2.0, x)  # site: numba-a
    axpy_numba[N // 256, 256](out, 3.0, x)  # site: numba-b
    cuda.synchronize()


def run_cupy() -> None:
    import cupy as cp

    x = cp.ones(N, dtype=cp.float32)
    raw = cp.RawKernel(RAW_SOURCE, "scale_raw")
    raw((N // 256,), (256,), (x, np.int32(N)))  # site: cupy-raw-a
    raw((N // 256,), (256,), (x, np.int32(N)))  # site: cupy-raw-b
    for _ in range(3):  # the second and third are cached launches (the C slot's short path)
        raw((N // 256,), (256,), (x, np.int32(N)))  # site: cupy-raw-repeated
    module = cp.RawModule(code=RAW_SOURCE)
    from_module = module.get_function("scale_raw")
    from_module((N // 256,), (256,), (x, np.int32(N)))  # site: cupy-rawmodule
    squared = cp.ElementwiseKernel("T x", "T y", "y = x * x", "square_elementwise")
    y = squared(x)  # site: cupy-elementwise
    total = cp.ReductionKernel("T x", "T y", "x", "a + b", "y = a", "0", "sum_reduction")
    total(y)  # site: cupy-reduction

    @cp.fuse(kernel_name="fused_axpb")
    def axpb(a, b):
        return a * 2 + b

    axpb(x, y)  # site: cupy-fuse
    cp.cuda.Device().synchronize()


def run_triton() -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one_triton(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    x = torch.empty(N, device="cuda", dtype=torch.float32)
    grid = (N // 256,)
    add_one_triton[grid](x, N, BLOCK=256)  # site: triton-a
    add_one_triton[grid](x, N, BLOCK=256)  # site: triton-b
    torch.cuda.synchronize()


def run_cuda_core() -> None:
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

    device = Device()
    device.set_current()
    stream = device.create_stream()
    arch = "sm_" + "".join(str(part) for part in device.compute_capability)
    program = Program(CORE_SOURCE, code_type="c++", options=ProgramOptions(arch=arch))
    kernel = program.compile("cubin").get_kernel("add_core")
    buffer = device.memory_resource.allocate(N * 4, stream=stream)
    config = LaunchConfig(grid=N // 256, block=256)
    launch(stream, config, kernel, buffer, np.int32(N))  # site: cuda_core
    stream.sync()


def run_pycuda() -> None:
    import pycuda.autoprimaryctx  # noqa: F401  (the primary context, shared with the others)
    import pycuda.driver as drv
    import pycuda.gpuarray as gpuarray
    from pycuda.compiler import SourceModule

    module = SourceModule(RAW_SOURCE.replace("scale_raw", "scale_pycuda"), no_extern_c=True)
    scale = module.get_function("scale_pycuda")
    x = gpuarray.to_gpu(np.ones(N, dtype=np.float32))
    scale(x, np.int32(N), block=(256, 1, 1), grid=(N // 256, 1))  # site: pycuda-call
    scale.prepare("Pi")
    scale.prepared_call((N // 256, 1), (256, 1, 1), x.gpudata, np.int32(N))  # site: pycuda-prepared
    x * 2  # site: pycuda-gpuarray
    drv.Context.synchronize()


def marked_sites() -> dict[str, int]:
    """`# site: NAME` markers of this file -> their line numbers."""
    lines = Path(__file__).read_text().splitlines()
    marker = re.compile(r"#\s*site:\s*(\S+)\s*$")
    return {m[1]: number for number, line in enumerate(lines, 1) if (m := marker.search(line))}


RUNS = (
    ("numba", run_numba),
    ("cupy", run_cupy),
    ("triton", run_triton),
    ("cuda_core", run_cuda_core),
    ("pycuda", run_pycuda),
)


def main() -> int:
    failed = 0
    ran = set()
    for lib, run in RUNS:
        try:
            run()
            ran.add(lib)
        except ImportError as exc:
            print(f"SKIP {lib}: {exc}")
        except Exception as exc:
            print(f"FAIL {lib}: {type(exc).__name__}: {exc}")
            failed += 1
    names = kname.names()
    print("kname.names():")
    for name, launches in names.items():
        print(f"  {name}: {launches}")
    for marker, line in marked_sites().items():
        if marker.split("-", 1)[0] not in ran:
            continue
        found = [(name, n) for name, n in names.items() if name.endswith(f".py:{line}")]
        for name, launches in found:
            print(f"SITE {marker} {line} {name} {launches}")
        if not found:
            print(f"MISSING {marker} {line}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
