"""Worker: kname's own per-launch cost on the CPU, for one NVTX tool setting.

Run by run.py in a fresh interpreter per setting (NVTX reads NVTX_INJECTION64_PATH once, at the
process's first NVTX call). The launch is a function that returns at once, configured as a
kname target (bench_noop_target.py), so what is measured is kname alone. Twice: launched from a
loop (the loop's frame is the call site), and from a function the loop calls once per launch, as
a training step is (a new frame at every launch). Also measured: the first launch from many new
call sites (the cache miss).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    interleave,
    launch_record,
    launch_variants,
    make_loops,
    quantile,
    use_checkout,
    write_json,
    write_module,
)

TARGETS = ["bench_noop_target:launch"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--miss-sites", type=int, default=2000)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    use_checkout()
    import bench_noop_target as target

    import kname

    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-"))
    loops = make_loops(
        workdir, "bench_loops_noop", "target.launch(arg)", {"target": target, "arg": 1}
    )
    samples = interleave(launch_variants(loops, TARGETS), args.rounds, args.batch)
    result = launch_record(samples, args.rounds, args.batch, "bench_loops_noop.py")
    step = write_module(workdir, "bench_step_noop", STEP_SOURCE)
    step.target = target
    step_loops = make_loops(
        workdir, "bench_loops_noop_step", "step(arg)", {"step": step.step, "arg": 1}
    )
    samples = interleave(launch_variants(step_loops, TARGETS), args.rounds, args.batch)
    result["step"] = launch_record(samples, args.rounds, args.batch, "bench_step_noop.py")
    kname.install(targets=TARGETS)
    result["miss"] = cache_miss(args.miss_sites, workdir, target)
    write_json(args.json, result)


STEP_SOURCE = """
def step(arg):
    target.launch(arg)
"""

SITE_TEMPLATE = """
def site_{i:05d}():
    target.launch(arg)
"""


def cache_miss(pairs: int, workdir: Path, target) -> dict:
    """First launch from a new call site: 2 * `pairs` freshly compiled functions, each launching
    once; even ones with kname.disable()d (the bare launch), odd ones through kname, alternating.

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
            for which in (0, 1) if i % 2 else (1, 0):
                if which == 0:
                    kname.disable()
                    t0 = clock()
                    plain()
                    bare.append(clock() - t0)
                else:
                    kname.enable()
                    t0 = clock()
                    named()
                    first.append(clock() - t0)
                    t0 = clock()
                    named()
                    second.append(clock() - t0)
    finally:
        gc.enable()
        kname.enable()

    def stats(values):
        return {"median_ns": statistics.median(values), "p90_ns": quantile(values, 0.9)}

    return {
        "pairs": pairs,
        "new_sites": len(callsite.sites) - sites_before,
        "bare_first_call": stats(bare),
        "kname_first_call": stats(first),
        "kname_second_call": stats(second),
        "added_ns": statistics.median(first) - statistics.median(bare),
    }


if __name__ == "__main__":
    main()
