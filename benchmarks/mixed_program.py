"""A mixed, launch-bound GPU program, run whole by benchmarks/profile_program.py.

    python benchmarks/mixed_program.py --out RESULT.json [--iterations 1500] [--warmup 50]
        [--floor LIBRARY] [--proton NAME] [--lines] [--count-calls]

One loop whose body has a line per kind of launch kname covers, each a kernel of realistic small
size (2**16 floats; a 128x128 matmul): a numba-cuda kernel, a CuPy ufunc (`a + b`), a CuPy
RawKernel, a CuPy reduction (`c.sum()`), torch's `t.add_(1.0)` and `w @ w`, a Triton kernel;
about nine GPU launches an iteration. A library that is not installed (or fails to start) loses
its lines, said in the result's `skipped`. The loop's source is written to a file beside the
result (`mixed_loop.py`), so that its lines are user code as kname sees them.

What runs it is the variant: plain (unprofiled), under `kname profile` (the runner starts it so),
`--floor` (CUPTI's floor: its activity records and an empty launch callback on kname profile's
launch APIs, started before any GPU library, as kname profile starts at interpreter start-up) or
`--proton` (Triton's Proton, context="python"). The timed part is `--iterations` of the loop and a
synchronize, after `--warmup` untimed iterations (compiles, call sites built). `--lines` times
each line apart (for the breakdown: the timer's own cost is the same in every variant);
`--count-calls` counts the Python function calls each line makes (sys.setprofile, on a few
iterations after the timed ones). The result (JSON): loop_ns, iterations, warmup, the lines
(label and line number), skipped, and under kname profile its launch API calls in the timed
loop (launch_calls).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

N = 1 << 16  # elements of the vector kernels' arrays
MATRIX = 128  # w @ w: a MATRIX x MATRIX matmul
BLOCK = 256


def start_floor(library: str) -> Callable[[], None]:
    """CUPTI's floor (cupti_floor.CallbackFloor, the kinds kname profile enables); returns its
    stop, which flushes CUPTI's buffers first, as kname profile does at exit."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cupti import cupti
    from cupti_floor import CallbackFloor

    from kname.profiling.cupti_collector import ACTIVITY_KINDS

    floor = CallbackFloor(Path(library))
    floor.start(cupti)
    for name in ACTIVITY_KINDS:
        cupti.activity_enable(getattr(cupti.ActivityKind, name))

    def stop() -> None:
        cupti.activity_flush_all(1)
        for name in ACTIVITY_KINDS:
            cupti.activity_disable(getattr(cupti.ActivityKind, name))
        floor.stop()

    return stop


def start_proton(name: str) -> Callable[[], None]:
    import triton.profiler as proton

    proton.start(name, context="python")
    return proton.finalize


# --- the workloads: each library's objects, and its line of the loop ------------------------


def numba_line(ns: dict) -> str:
    global cuda  # the kernel's `cuda` a module global (the simulator swaps those, for a test)
    import numpy as np

    if not hasattr(np, "row_stack"):  # numba-cuda 0.30 calls it; numpy 2.5 removed it
        np.row_stack = np.vstack
    from numba import cuda

    @cuda.jit(cache=True)
    def scale(out, x, n):
        i = cuda.grid(1)
        if i < n:
            out[i] = 2.0 * x[i]

    ns.update(
        nb_scale=scale,
        nb_x=cuda.to_device(np.ones(ns["N"], dtype=np.float32)),
        nb_out=cuda.device_array(ns["N"], dtype=np.float32),
        nb_sync=cuda.synchronize,
    )
    return "nb_scale[(N + BLOCK - 1) // BLOCK, BLOCK](nb_out, nb_x, N)"


def cupy_lines(ns: dict) -> dict[str, str]:
    import cupy as cp

    raw = cp.RawKernel(
        'extern "C" __global__ void axpy(float *y, const float *x, int n)'
        "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 2.0f * x[i]; }",
        "axpy",
    )
    ns.update(
        cp_a=cp.ones(ns["N"], dtype=cp.float32),
        cp_b=cp.ones(ns["N"], dtype=cp.float32),
        cp_raw=raw,
        cp_n=cp.int32(ns["N"]),
        cp_sync=cp.cuda.Device().synchronize,
    )
    return {
        "cupy-ufunc": "cp_c = cp_a + cp_b",
        "cupy-raw": "cp_raw(((N + BLOCK - 1) // BLOCK,), (BLOCK,), (cp_b, cp_a, cp_n))",
        "cupy-sum": "cp_s = cp_c.sum()",
    }


def torch_lines(ns: dict) -> dict[str, str]:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    ns.update(
        th_t=torch.zeros(ns["N"], device="cuda"),
        th_w=torch.rand(MATRIX, MATRIX, device="cuda") / MATRIX,
        th_sync=torch.cuda.synchronize,
    )
    return {"torch-add": "th_t.add_(1.0)", "torch-matmul": "th_m = th_w @ th_w"}


def triton_line(ns: dict) -> str:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    ns.update(
        tr_add=add,
        tr_x=torch.ones(ns["N"], device="cuda"),
        tr_y=torch.zeros(ns["N"], device="cuda"),
        tr_sync=torch.cuda.synchronize,
    )
    return "tr_add[((N + 1023) // 1024,)](tr_x, tr_y, N, BLOCK_SIZE=1024)"


WORKLOADS: dict[str, Callable[[dict], str | dict[str, str]]] = {
    "numba": numba_line,
    "cupy": cupy_lines,
    "torch": torch_lines,
    "triton": triton_line,
}


def workloads(ns: dict) -> tuple[dict[str, str], dict[str, str]]:
    """{label: the loop's line} of every library that starts here, and {library: why not}."""
    lines: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for library, make in WORKLOADS.items():
        try:
            made = make(ns)
        except Exception as exc:  # not installed, no device, a library that fails to start
            skipped[library] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            continue
        lines.update(made if isinstance(made, dict) else {library: made})
    return lines, skipped


# --- the loop, written as user code -----------------------------------------------------------

LOOP = '''\
"""Generated by benchmarks/mixed_program.py: the benchmark's loop."""
from time import perf_counter_ns


def loop(iterations):
    for _ in range(iterations):
{body}


def timed_lines(iterations, spent):
    for _ in range(iterations):
{timed_body}
'''


def write_loop(folder: Path, lines: dict[str, str], ns: dict):
    """The loop's functions, compiled from mixed_loop.py in `folder` with `ns` as their globals
    (a module of its own name: user code, as kname judges it); and {label: (its line number in
    loop(), in timed_lines())}."""
    body = "\n".join(f"        {line}" for line in lines.values()) or "        pass"
    timed = []
    for index, line in enumerate(lines.values()):
        timed += [
            "        start = perf_counter_ns()",
            f"        {line}",
            f"        spent[{index}] += perf_counter_ns() - start",
        ]
    source = LOOP.format(body=body, timed_body="\n".join(timed) or "        pass")
    path = folder / "mixed_loop.py"
    path.write_text(source)
    ns.update(__name__="mixed_loop", __file__=str(path))
    exec(compile(source, str(path), "exec"), ns)
    # Each label's line in loop() and in timed_lines() (three lines a label there).
    first = source.splitlines().index("def loop(iterations):") + 1
    timed = source.splitlines().index("def timed_lines(iterations, spent):") + 1
    numbers = {label: (first + 2 + i, timed + 3 + 3 * i) for i, label in enumerate(lines)}
    return ns["loop"], ns["timed_lines"], numbers


def synchronize(ns: dict) -> None:
    for name in ("th_sync", "cp_sync", "nb_sync", "tr_sync"):
        if name in ns:
            ns[name]()
            return


def launch_calls() -> int | None:
    """kname profile's launch API calls so far, where it collects in this process."""
    session = getattr(sys.modules.get("kname.profiling.mode"), "_session", None)
    return session.join.launch_count if session is not None else None


def count_calls(loop, iterations: int, numbers: dict[str, int]) -> dict[str, float]:
    """Python function calls each line of the loop makes, per iteration (sys.setprofile: every
    Python frame started, charged to the loop's line running beneath it)."""
    by_line = {number: label for label, number in numbers.items()}
    counts = dict.fromkeys(numbers, 0)
    loop_code = loop.__code__

    def profiler(frame, event, arg):
        if event != "call" or frame.f_code is loop_code:
            return
        caller = frame.f_back
        while caller is not None and caller.f_code is not loop_code:
            caller = caller.f_back
        if caller is not None and caller.f_lineno in by_line:
            counts[by_line[caller.f_lineno]] += 1

    sys.setprofile(profiler)
    try:
        loop(iterations)
    finally:
        sys.setprofile(None)
    return {label: count / iterations for label, count in counts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--iterations", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--floor", metavar="LIBRARY", help="CUPTI's floor, this library built")
    parser.add_argument("--proton", metavar="NAME", help="under Proton, its output NAME")
    parser.add_argument("--lines", action="store_true", help="time each line apart")
    parser.add_argument("--count-calls", action="store_true", help="Python calls per line")
    parser.add_argument("--elements", type=int, default=N, help=f"vector length (default {N})")
    args = parser.parse_args()
    stop = start_floor(args.floor) if args.floor else None
    if args.proton:
        stop = start_proton(args.proton)
    ns: dict = {"N": args.elements, "BLOCK": BLOCK}
    lines, skipped = workloads(ns)
    out = Path(args.out)
    loop, timed_lines, numbers = write_loop(out.parent, lines, ns)
    loop(args.warmup)  # compiles, call sites built
    synchronize(ns)
    result: dict = {"iterations": args.iterations, "warmup": args.warmup, "skipped": skipped}
    result["lines"] = [
        {"label": label, "line": numbers[label][0], "timed_line": numbers[label][1]}
        for label in lines
    ]
    before = launch_calls()
    start = time.perf_counter_ns()
    if args.lines:
        spent = [0] * len(lines)
        timed_lines(args.iterations, spent)
    else:
        loop(args.iterations)
    synchronize(ns)
    result["loop_ns"] = time.perf_counter_ns() - start
    after = launch_calls()
    if before is not None and after is not None:
        result["launch_calls"] = after - before
    if args.lines:
        result["line_ns"] = dict(zip(lines, spent, strict=True))
    if args.count_calls:
        result["python_calls"] = count_calls(loop, 20, {k: v[0] for k, v in numbers.items()})
        synchronize(ns)
    if stop is not None:
        stop()
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
