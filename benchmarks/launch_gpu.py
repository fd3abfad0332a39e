"""Worker: the per-launch cost of real GPU launches, for one library and one NVTX tool setting.

Run by `run.py --gpu` in a fresh interpreter per setting. Each library launches a tiny kernel
(one block of 32 threads), so the CPU side of the launch, which is what kname adds to, dominates:
  numba   numba-cuda `kernel[1, 32](arr)` on a device array
  cupy    CuPy `kernel((1,), (32,), (arr, n))`, a RawKernel
  triton  Triton `kernel[(1,)](arr, 32, BLOCK=32)` on a torch tensor (Triton's own array type)
The device is synchronised before and after every batch, untimed, so launch queues never fill.
A library that cannot be imported is reported as skipped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    interleave,
    launch_record,
    launch_variants,
    make_loops,
    use_checkout,
    write_json,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", choices=sorted(SETUPS), required=True)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    use_checkout()
    try:
        launch, names, bare_names, sync, device = SETUPS[args.lib]()
    except ImportError as exc:
        missing = exc.name or str(exc)
        write_json(args.json, {"skipped": f"{missing} is not installed (needed for {args.lib})"})
        return
    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-gpu-"))
    loops = make_loops(workdir, f"bench_loops_{args.lib}", launch, names)
    loops.launch_loop(1)  # compile and load the kernel before anything is timed
    sync()
    variants = launch_variants(loops, [args.lib], bare_names, settle=sync)
    samples = interleave(variants, args.rounds, args.batch)
    result = launch_record(samples, args.rounds, args.batch)
    write_json(args.json, {**result, "launch": launch, "device": device})


def setup_numba():
    import numpy as np

    # numba-cuda 0.30 still calls numpy.row_stack, which numpy 2.5 removed: alias it in this
    # program only, before numba is imported.
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    global cuda  # a module global: numba's simulator swaps a kernel's global `cuda` for its own
    from numba import cuda

    @cuda.jit
    def increment(a):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < a.size:
            a[i] += 1

    arr = cuda.to_device(np.zeros(32, dtype=np.float32))
    device = _text(getattr(cuda.get_current_device(), "name", "?"))
    return "kernel[1, 32](arr)", {"kernel": increment, "arr": arr}, None, cuda.synchronize, device


RAW_SOURCE = r"""
extern "C" __global__ void increment(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += 1.0f;
}
"""


def setup_cupy():
    import cupy as cp
    import numpy as np

    import kname

    # CuPy's kernel classes cannot be patched: install() binds kname's subclasses under their
    # names, so only a kernel made while kname is installed is named. The bare variants launch
    # one made before, of CuPy's own class.
    plain = cp.RawKernel(RAW_SOURCE, "increment")
    kname.install(targets=["cupy"])
    named = cp.RawKernel(RAW_SOURCE, "increment")
    if type(named) is type(plain):
        raise SystemExit("kname.install(targets=['cupy']) did not replace cupy.RawKernel")
    names = {"kernel": named, "arr": cp.zeros(32, dtype=cp.float32), "n": np.int32(32)}
    device = _text(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"])
    sync = cp.cuda.Device().synchronize
    return "kernel((1,), (32,), (arr, n))", names, {"kernel": plain}, sync, device


def setup_triton():
    global triton, tl  # module globals: Triton resolves the names a kernel uses through them
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def increment(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(x_ptr + offsets, x + 1, mask=mask)

    names = {"kernel": increment, "arr": torch.zeros(32, device="cuda", dtype=torch.float32)}
    device = torch.cuda.get_device_name()
    return "kernel[(1,)](arr, 32, BLOCK=32)", names, None, torch.cuda.synchronize, device


SETUPS = {"numba": setup_numba, "cupy": setup_cupy, "triton": setup_triton}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    main()
