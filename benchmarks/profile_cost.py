"""kname profile's cost per launch, beside CUPTI's own floor, on a GPU: one launch kind at a time.

    PYTHONPATH=. python3 benchmarks/profile_cost.py [--rounds 15] [--batch 2000] [--clock thread]

Each workload is one launch repeated `batch` times: three kname wraps (a numba-cuda kernel, a
CuPy RawKernel, a Triton kernel) and two it does not (a CuPy ufunc into a preallocated array,
torch's in-place add), caught at the CUDA launch API; and the replay of a CUDA graph of 100
CuPy kernels (`graph-100`: one launch API call and 100 GPU records per launch; captured again at
each variant's start, so that kname profile sees its nodes made and ties each of the 100 records
of a replay to its capture line). kname is installed throughout (its NVTX naming costs the same
in every variant). Without a GPU it says so in one line and exits. The variants, interleaved in a
new order every round:

    bare      no CUPTI at all;
    activity  CUPTI's activity records alone (kernels, copies, sets), their buffers freed unread
              in C (kname._native_cupti, with no launch callback): what any CUPTI-based
              profiler pays, the floor;
    callbacks the same records, plus a callback that returns at once on the launch APIs kname
              profile subscribes to (benchmarks/cupti_callback_floor.c, built here): the floor
              of any profiler that sees each launch at its API, before its own work;
    binding   the same records handed to cupti-python, which makes a Python object of each, to
              a consumer that drops them (what kname's Python fallback reads through);
    kname     a kname profile session (launch callbacks, the join, the totals): `--json`;
    trace     the same with the trace kept (`--trace`, KNAME_PROFILE_TRACE): its records kept
              in C and, after the flush, its JSON written (timed apart, per launch).

Two costs are timed apart. The launch loop: `batch` launches and a synchronize (by the wall
clock, or with --clock thread by the launching thread's CPU time). Reading the records: the
forced flush of CUPTI's buffers after the loop (wall clock), which hands every record of the
batch over; kname's reading cost per launch is its flush time less the activity variant's (the
flush itself costs the same in both), over the batch. The trace's cost is given over the kname
variant's (`--trace` over `--json` alone, in the same rounds). Prints, per workload, the medians
over rounds, with the lower and upper quartiles of the per-round differences. Needs cupti-python of
the machine's CUDA release, kname._native_cupti (built in place: setup.py build_ext) and a C
compiler.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# numba-cuda 0.30 calls numpy.row_stack, which numpy 2.5 removed: this program aliases it.
import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import no_gpu, round_orders  # noqa: E402
from cupti_floor import CallbackFloor  # noqa: E402

import kname  # noqa: E402
from kname import hotpath  # noqa: E402
from kname.profiling.capture import LaunchCapture  # noqa: E402
from kname.profiling.session import ProfileSession  # noqa: E402

ACTIVITIES = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET")
VARIANTS = ("bare", "activity", "callbacks", "binding", "kname", "trace")
SESSIONS = {"kname": False, "trace": True}  # the kname variants: keep_streams
N = 4096
GRAPH_NODES = 100


def numba_workload():
    from numba import cuda

    @cuda.jit
    def increment(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1

    d = cuda.to_device(np.zeros(N, dtype=np.float32))
    return lambda: increment[N // 256, 256](d), cuda.synchronize


def cupy_raw_workload():
    import cupy as cp

    raw = cp.RawKernel(
        'extern "C" __global__ void inc(float *a, int n)'
        "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += 1; }",
        "inc",
    )
    a, n = cp.zeros(N, dtype=cp.float32), np.int32(N)
    return lambda: raw((N // 256,), (256,), (a, n)), cp.cuda.Device().synchronize


def cupy_ufunc_workload():
    import cupy as cp

    a, out = cp.ones(N, dtype=cp.float32), cp.empty(N, dtype=cp.float32)
    return lambda: cp.add(a, a, out=out), cp.cuda.Device().synchronize


def torch_workload():
    import torch

    t = torch.zeros(N, device="cuda")
    return lambda: t.add_(1), torch.cuda.synchronize


def triton_workload():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def increment(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    x = torch.zeros(N, device="cuda")
    return lambda: increment[(N // 256,)](x, N, BLOCK=256), torch.cuda.synchronize


def cupy_graph_workload():
    """A CUDA graph of GRAPH_NODES CuPy kernels, replayed; `capture` makes it again."""
    import cupy as cp

    a, out = cp.ones(N, dtype=cp.float32), cp.empty(N, dtype=cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    graph: list[Any] = []

    def capture() -> None:
        with stream:
            cp.add(a, a, out=out)  # compiled, and the pool warm, before the capture
            stream.begin_capture()
            for _ in range(GRAPH_NODES):
                cp.add(a, a, out=out)
            graph[:] = [stream.end_capture()]

    capture()
    return lambda: graph[0].launch(stream), stream.synchronize, capture


WORKLOADS: dict[str, tuple[str, Callable]] = {
    "numba": ("numba-cuda kernel (wrapped)", numba_workload),
    "cupy-raw": ("CuPy RawKernel (wrapped)", cupy_raw_workload),
    "triton": ("Triton kernel (wrapped)", triton_workload),
    "cupy-ufunc": ("CuPy ufunc (at the launch API)", cupy_ufunc_workload),
    "torch": ("torch in-place add (at the launch API)", torch_workload),
    "graph-100": (
        f"a CUDA graph of {GRAPH_NODES} CuPy kernels, replayed (a launch is one replay)",
        cupy_graph_workload,
    ),
}


class Variants:
    """Switches CUPTI between the variants; `flush()` hands every buffer over."""

    def __init__(self) -> None:
        from cupti import cupti

        self.cupti = cupti
        self.session: ProfileSession | None = None
        self.floor: Any = None  # the activity variant's recorder (kname._native_cupti)
        self.callback_floor = CallbackFloor()
        self.trace_writes: list[int] = []  # ns to write the trace's JSON, one per trace round

    def start(self, variant: str) -> None:
        cupti = self.cupti
        if variant == "activity":
            self.floor = floor_recorder(cupti)
        elif variant == "callbacks":
            self.callback_floor.start(cupti)
        elif variant == "binding":
            cupti.activity_register_callbacks(lambda: (8 << 20, 0), lambda activities: None)
        elif variant in SESSIONS:
            self.session = ProfileSession(keep_streams=SESSIONS[variant])
            if not self.session.start():
                raise SystemExit("kname profile could not start CUPTI here")
        if variant in ("activity", "callbacks", "binding"):
            for name in ACTIVITIES:
                cupti.activity_enable(getattr(cupti.ActivityKind, name))

    def stop(self, variant: str) -> None:
        cupti = self.cupti
        if variant in ("activity", "callbacks", "binding"):
            for name in ACTIVITIES:
                cupti.activity_disable(getattr(cupti.ActivityKind, name))
            self.flush(variant)
        if variant == "activity":
            self.floor.unsubscribe()
            self.floor = None
        elif variant == "callbacks":
            self.callback_floor.stop()
        elif variant in SESSIONS and self.session is not None:
            self.session.stop()
            if variant == "trace":  # what --trace costs at exit: its JSON written
                start = time.perf_counter_ns()
                self.session._trace_text()
                self.trace_writes.append(time.perf_counter_ns() - start)
            self.session = None

    def flush(self, variant: str) -> None:
        if variant == "activity":
            self.floor.flush_activities(1)
        elif variant != "bare":
            self.cupti.activity_flush_all(1)  # forced: every buffer is handed over now


def floor_recorder(cupti: Any) -> Any:
    """A native recorder subscribed with no launch callback, holding CUPTI's activity buffers
    and freeing them unread: the least any CUPTI-based profiler pays for the same records."""
    from kname.profiling.join import Join
    from kname.profiling.native_callback import NativeCallbacks, libcupti_path

    module, why = hotpath.choose(True).cupti()
    if module is None:
        raise SystemExit(f"the activity variant needs kname._native_cupti: {why}")
    cupti.get_timestamp()  # the binding loads libcupti
    recorder = NativeCallbacks(module, LaunchCapture(Join())).make_recorder([])
    status, holder = recorder.subscribe(libcupti_path())
    if status or recorder.take_activity_buffers(8 << 20, 1, None):
        raise SystemExit(
            f"CUPTI refused the activity variant's recorder (status {status}, {holder})"
        )
    recorder.release_activity_buffers()
    return recorder


def timed_loop(launch: Callable, synchronize: Callable, batch: int, clock: Callable) -> float:
    start = clock()
    for _ in range(batch):
        launch()
    synchronize()
    return clock() - start


def timed_flush(variants: Variants, variant: str) -> float:
    start = time.perf_counter_ns()
    variants.flush(variant)
    return time.perf_counter_ns() - start


def measure(variants: Variants, workload: tuple, rounds: int, batch: int, clock: Callable) -> dict:
    """Per variant, [ns per launch of the loop] and [ns of the flush], one per round; and the
    launch calls kname saw per launch. `workload` is (launch, synchronize[, prepare]): prepare()
    runs once the variant has started (a graph captured again, seen by that variant)."""
    launch, synchronize, *prepare = workload
    loops: dict[str, list[float]] = {name: [] for name in VARIANTS}
    flushes: dict[str, list[float]] = {name: [] for name in VARIANTS}
    calls = []
    for order in round_orders(VARIANTS, rounds):
        for variant in order:
            variants.start(variant)
            for step in prepare:
                step()
            launch()  # untimed: sites built, CUPTI's first launch of this kind made
            synchronize()
            variants.flush(variant)
            before = variants.session.join.launch_count if variants.session else 0
            loops[variant].append(timed_loop(launch, synchronize, batch, clock) / batch)
            flushes[variant].append(timed_flush(variants, variant))
            if variants.session is not None:
                calls.append((variants.session.join.launch_count - before) / batch)
            variants.stop(variant)
    writes = [ns / (batch + 1) for ns in variants.trace_writes]  # the untimed launch too
    variants.trace_writes.clear()
    return {
        "loops": loops,
        "flushes": flushes,
        "calls": statistics.median(calls) if calls else 0,
        "trace_writes": writes,
    }


def added(samples: list[float], base: list[float], scale: float) -> tuple[float, float, float]:
    """Median, lower and upper quartile of the per-round differences, times `scale`."""
    diffs = sorted(scale * (a - b) for a, b in zip(samples, base, strict=True))
    quartiles = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [diffs[0]] * 3
    return statistics.median(diffs), quartiles[0], quartiles[2]


def spread(values: tuple[float, float, float]) -> str:
    return f"{values[0]:+.2f} us [{values[1]:+.2f}, {values[2]:+.2f}]"


def report(name: str, label: str, result: dict, batch: int, records: int = 1) -> list[str]:
    loops, flushes = result["loops"], result["flushes"]
    us = 1e-3  # ns -> us
    floor = added(loops["activity"], loops["bare"], us)
    callbacks = added(loops["callbacks"], loops["bare"], us)
    loop = added(loops["kname"], loops["bare"], us)
    reading = added(flushes["kname"], flushes["activity"], us / batch)
    binding = added(flushes["binding"], flushes["activity"], us / batch)
    trace_loop = added(loops["trace"], loops["kname"], us)
    trace_reading = added(flushes["trace"], flushes["kname"], us / batch)
    writes = result["trace_writes"]
    write = statistics.median(writes) * us if writes else 0.0
    return [
        f"{name} - {label}: bare {statistics.median(loops['bare']) * us:.2f} us per launch, "
        f"{result['calls']:.0f} launch API call(s) each",
        f"  launch loop, added: CUPTI activity alone {spread(floor)}; with an empty launch "
        f"callback {spread(callbacks)}; kname profile {spread(loop)}",
        f"  reading the records at the flush, per launch beyond the floor's: "
        f"kname {spread(reading)}; cupti-python's record objects alone {spread(binding)}",
        f"  kname profile in all, per launch: {loop[0] + reading[0]:+.2f} us "
        f"({loop[0] + reading[0] - floor[0]:+.2f} us above CUPTI's activity records alone, "
        f"{loop[0] + reading[0] - callbacks[0]:+.2f} us above them with an empty callback)",
        f"  --trace over --json alone, per launch: launch loop {spread(trace_loop)}, reading "
        f"{spread(trace_reading)}, in all {trace_loop[0] + trace_reading[0]:+.2f} us; its JSON "
        f"written at exit {write:.2f} us",
        *(
            [
                f"  per GPU record ({records} a launch): kname profile "
                f"{(loop[0] + reading[0]) / records:+.3f} us, "
                f"{(loop[0] + reading[0] - floor[0]) / records:+.3f} us above CUPTI's floor"
            ]
            if records > 1
            else []
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--clock", choices=("wall", "thread"), default="wall")
    parser.add_argument("--only", default=",".join(WORKLOADS), help="comma-separated workloads")
    args = parser.parse_args()
    clock = time.perf_counter_ns if args.clock == "wall" else time.thread_time_ns
    missing = no_gpu()
    if missing:
        print(f"profile_cost: skipped, {missing}")
        return
    kname.install()
    variants = Variants()
    print(
        f"{args.rounds} rounds of {args.batch} launches; launch loops timed by the "
        f"{'wall clock' if args.clock == 'wall' else 'launching thread CPU time'}; medians "
        "[lower, upper quartile] of the per-round differences"
    )
    for name in args.only.split(","):
        label, setup = WORKLOADS[name]
        try:
            workload = setup()
            workload[0]()  # compiles
            workload[1]()
        except ImportError as exc:
            print(f"{name}: skipped: {exc}")
            continue
        result = measure(variants, workload, args.rounds, args.batch, clock)
        records = GRAPH_NODES if name == "graph-100" else 1
        print("\n".join(report(name, label, result, args.batch, records)), flush=True)


if __name__ == "__main__":
    main()
