"""Worker: the per-launch cost of real GPU launches, for one library and one NVTX tool setting.

Run by `run.py --gpu` in a fresh interpreter per setting. Libraries, each with a tiny kernel
(one block of 32 threads) so that the CPU-side launch cost dominates:
  numba   numba-cuda `kernel[1, 32](device_array)`
  cupy    CuPy `RawKernel((1,), (32,), (array, n))`
  triton  Triton `kernel[(1,)](tensor, n, BLOCK=32)` (on a torch tensor)
kname's variants run only where kname has a built-in target for the library (checked at run
time in kname.targets.BUILTIN); the other variants run regardless. The device is synchronised
after every batch, outside the timed region, so launch queues never fill.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

# numba-cuda 0.30 calls numpy.row_stack, which numpy 2.5 removed: alias it here, in the benchmark
# program only (never inside kname), before numba is imported.
import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PatchState,
    Variant,
    interleave,
    loop_variants,
    make_loops,
    summarize,
    use_checkout,
    write_json,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", choices=("numba", "cupy", "triton"), required=True)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    use_checkout()
    import kname.nvtx

    import kname
    import kname.targets

    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-gpu-"))
    builtin = args.lib in kname.targets.BUILTIN
    if builtin:
        # Before the library is imported and its kernel made: CuPy kernels made before install()
        # keep CuPy's own class and are never named.
        kname.install(targets=[args.lib])
    launch, names, sync, info = SETUPS[args.lib]()
    launch_once = compile(launch, "<first launch>", "exec")
    with kname.paused():
        exec(launch_once, dict(names))  # compile/load the kernel before anything is timed
    sync()
    state = PatchState(args.lib, none=not builtin)
    with_kname = state.active
    loops = make_loops(workdir, f"bench_loops_{args.lib}", launch, names)
    state.original()
    variants = loop_variants(loops, state, with_kname=with_kname)
    proto_note, extra = None, []
    if with_kname:
        try:
            extra, proto_note = prototype_variants(args.lib, state, loops, names, workdir)
        except Exception as exc:  # the prototypes are extras: never lose the main rows
            extra, proto_note = [], f"prototypes failed: {type(exc).__name__}: {exc}"
            state.original()
        variants += extra
    for variant in variants:
        variant.settle = sync
    samples = interleave(variants, args.rounds, args.batch)
    sync()
    write_json(
        args.json,
        {
            "workload": args.lib,
            "launch": launch,
            "rounds": args.rounds,
            "batch": args.batch,
            "stack_depth": loops.STACK_DEPTH,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "kname_target": builtin,
            "kname_measured": with_kname,
            "tool_attached": kname.nvtx.tool_attached(),
            "variants": summarize(samples),
            "site_names": {name: n for name, n in kname.names().items() if n},
            "prototypes": proto_note,
            "prototype_sites": {
                v.name: len(v.wrapper.sites) for v in extra if hasattr(v, "wrapper")
            },
            "device": info,
        },
    )


def prototype_variants(lib, state: PatchState, loops, names, workdir):
    """The hot-path prototypes of prototype_hot_path.py put where kname's wrapper goes."""
    import operator

    import prototype_hot_path as proto

    fastpath, why = proto.load_fastpath(workdir / "build")
    if lib == "numba" and state.patches:
        patch = state.patches[0]
        owner, attribute, original = patch.owner, patch.attribute, patch.original
        name_of = lambda d: d.py_func.__qualname__  # noqa: E731
        lean = proto.make_lean(original, lambda a: a[0].dispatcher, name_of, lib, False)
        fast = fastpath and proto.make_c(fastpath, original, name_of, lib, 2, "dispatcher")
    elif lib == "cupy" and getattr(type(names["kernel"]), "_kname_wrapper", False):
        owner, attribute = type(names["kernel"]), "__call__"
        original = owner.__mro__[1].__call__
        lean = proto.make_lean(original, operator.itemgetter(0), lambda k: k.name, lib)
        fast = fastpath and proto.make_c(fastpath, original, lambda k: k.name, lib, mode=1)
    elif lib == "triton" and state.undos:
        return triton_empty_hooks(state, loops), "triton: empty hooks only"
    else:
        return [], "no prototype for this target"

    def put(wrapper):
        def prepare():
            state.original()
            setattr(owner, attribute, wrapper)

        return prepare

    def restore():
        if state.patches:
            state.original()
        elif attribute in vars(owner):
            delattr(owner, attribute)

    variants = [Variant("lean", loops.launch_loop, put(lean), restore)]
    variants[0].wrapper = lean
    if fast:
        variants.append(Variant("c_fastpath", loops.launch_loop, put(fast), restore))
        variants[1].wrapper = fast
    return variants, why or "built"


def triton_empty_hooks(state: PatchState, loops) -> list:
    """Reference for Triton: do-nothing enter/exit hooks in Triton's launch hook chains, where
    kname puts its own: how much of kname's cost is Triton's hook machinery itself."""
    import triton.knobs

    runtime = triton.knobs.runtime

    def enter(metadata):
        return None

    def leave(metadata):
        return None

    def prepare():
        state.original()
        runtime.launch_enter_hook.add(enter)
        runtime.launch_exit_hook.add(leave)

    def restore():
        runtime.launch_enter_hook.remove(enter)
        runtime.launch_exit_hook.remove(leave)

    return [Variant("triton_empty_hooks", loops.launch_loop, prepare, restore)]


def setup_numba():
    # A module global, not a closure variable: numba's simulator (handy for trying this worker
    # without a GPU) swaps the kernel's global `cuda` for its fake one.
    global cuda
    from numba import cuda

    @cuda.jit
    def increment(a):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < a.size:
            a[i] += 1

    arr = cuda.to_device(np.zeros(32, dtype=np.float32))
    device = cuda.get_current_device()
    info = {
        "name": _text(getattr(device, "name", "?")),
        "compute_capability": list(getattr(device, "compute_capability", ())),
    }
    return "kernel[1, 32](arr)", {"kernel": increment, "arr": arr}, cuda.synchronize, info


RAW_SOURCE = r"""
extern "C" __global__ void increment(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += 1.0f;
}
"""


def setup_cupy():
    import cupy as cp

    kernel = cp.RawKernel(RAW_SOURCE, "increment")
    arr = cp.zeros(32, dtype=cp.float32)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    info = {"name": _text(props["name"]), "cuda_runtime": cp.cuda.runtime.runtimeGetVersion()}
    names = {"kernel": kernel, "arr": arr, "n": np.int32(32)}
    return "kernel((1,), (32,), (arr, n))", names, cp.cuda.Device().synchronize, info


def setup_triton():
    # Module globals, as Triton resolves the names a kernel uses through its globals.
    global triton, tl
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def increment(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(x_ptr + offsets, x + 1, mask=mask)

    arr = torch.zeros(32, device="cuda", dtype=torch.float32)
    info = {
        "name": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
    return (
        "kernel[(1,)](arr, 32, BLOCK=32)",
        {"kernel": increment, "arr": arr},
        torch.cuda.synchronize,
        info,
    )


SETUPS = {"numba": setup_numba, "cupy": setup_cupy, "triton": setup_triton}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


if __name__ == "__main__":
    main()
