"""Worker: the per-launch cost on the CPU, for one workload and one NVTX tool setting.

Run by run.py in a fresh interpreter per setting: NVTX reads NVTX_INJECTION64_PATH once, at the
process's first NVTX call. Workloads:
  noop  a launch function that does nothing, configured as a kname target (kname's own cost),
        plus the first launch from many new call sites (the cache miss);
  sim   numba-cuda's CUDA simulator (NUMBA_ENABLE_CUDASIM=1), `kernel[1, 1](arr)`.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PatchState,
    interleave,
    loop_variants,
    make_loops,
    quantile,
    summarize,
    use_checkout,
    write_json,
    write_module,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=("noop", "sim"), required=True)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--miss-sites", type=int, default=2000)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    use_checkout()
    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-"))
    result = noop(args, workdir) if args.workload == "noop" else sim(args, workdir)
    write_json(args.json, result)


def noop(args, workdir: Path) -> dict:
    import bench_noop_target as target
    import kname.nvtx

    import kname

    kname.install(targets=["bench_noop_target:launch"])
    state = PatchState()
    loops = make_loops(
        workdir, "bench_loops_noop", "target.launch(arg)", {"target": target, "arg": 1}
    )
    state.original()
    result = measure(args, loops, state)
    result["miss"] = cache_miss(args.miss_sites, workdir, target, state)
    result["tool_attached"] = kname.nvtx.tool_attached()
    return result


def sim(args, workdir: Path) -> dict:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise SystemExit("the sim workload needs NUMBA_ENABLE_CUDASIM=1 in the environment")
    import kname.nvtx
    import numpy as np
    from numba import cuda

    import kname

    @cuda.jit
    def increment(a):
        a[0] += 1

    arr = cuda.to_device(np.zeros(1))
    kname.install(targets=["numba"])
    state = PatchState()
    if not state.active:
        raise SystemExit("kname did not patch numba's simulator launch")
    loops = make_loops(
        workdir, "bench_loops_sim", "kernel[1, 1](arr)", {"kernel": increment, "arr": arr}
    )
    state.original()
    result = measure(args, loops, state)
    result["tool_attached"] = kname.nvtx.tool_attached()
    return result


def measure(args, loops, state: PatchState) -> dict:
    import kname

    variants = loop_variants(loops, state)
    started = time.perf_counter()
    samples = interleave(variants, args.rounds, args.batch)
    return {
        "workload": args.workload,
        "rounds": args.rounds,
        "batch": args.batch,
        "stack_depth": loops.STACK_DEPTH,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.perf_counter() - started, 2),
        "variants": summarize(samples),
        # Proof that the kname variant named its launches (and where).
        "site_names": {name: count for name, count in kname.names().items() if count},
    }


SITE_TEMPLATE = """
def site_{i:05d}():
    target.launch(arg)
"""


def cache_miss(pairs: int, workdir: Path, target, state: PatchState) -> dict:
    """First launch from a new call site: 2 * `pairs` freshly compiled functions, each launching
    once; even ones against the bare launch, odd ones through kname, alternating.

    Both halves pay the same first-call costs of a new function; the difference is kname's miss
    (classifying the new code object, building the name, registering it with NVTX).
    """
    import kname
    from kname import callsite

    source = "".join(SITE_TEMPLATE.format(i=i) for i in range(2 * pairs))
    module = write_module(workdir, "bench_sites_noop", source)
    module.target, module.arg = target, 1
    functions = [getattr(module, f"site_{i:05d}") for i in range(2 * pairs)]
    sites_before = len(callsite.sites)
    clock = time.perf_counter_ns
    bare, first, second = [], [], []
    gc.disable()
    try:
        for i in range(pairs):
            plain, named = functions[2 * i], functions[2 * i + 1]
            order = (0, 1) if i % 2 else (1, 0)
            for which in order:
                if which == 0:
                    state.original()
                    t0 = clock()
                    plain()
                    bare.append(clock() - t0)
                else:
                    state.wrapped()
                    t0 = clock()
                    named()
                    first.append(clock() - t0)
                    t0 = clock()
                    named()
                    second.append(clock() - t0)
    finally:
        gc.enable()
        state.original()
    new_sites = len(callsite.sites) - sites_before
    assert kname.is_enabled()

    def stats(values):
        return {
            "median_ns": statistics.median(values),
            "p10_ns": quantile(values, 0.1),
            "p90_ns": quantile(values, 0.9),
        }

    return {
        "pairs": pairs,
        "new_sites": new_sites,
        "bare_first_call": stats(bare),
        "kname_first_call": stats(first),
        "kname_second_call": stats(second),
        "added_ns": statistics.median(first) - statistics.median(bare),
        "added_p90_ns": quantile(first, 0.9) - quantile(bare, 0.9),
    }


if __name__ == "__main__":
    main()
