"""What the launch-bound verdict's CPU launch times cost per launch under kname profile, on a GPU.

    PYTHONPATH=. python3 benchmarks/verdict_cost.py [--rounds 21] [--batch 2000]

One kname profile session (the native callback, the join in C), its launch timing switched
between rounds, interleaved in a new order every round:

    untimed   no launch call timed (kname profile without a trace: main at 78169ee);
    outer     outermost launch calls timed at enter and exit (cuptiGetTimestamp twice a launch:
              the verdict's choice);
    every     every launch call timed, the driver's inside the runtime's too (what --trace does);
    api       untimed, plus CUPTI's runtime and driver API activity records (each API call's
              start and end from CUPTI itself, the other source considered), read and skipped.

Per workload (torch's in-place add: cudaLaunchKernel around cuLaunchKernel; a CuPy RawKernel:
cuLaunchKernel alone), the launch loop (`batch` launches and a synchronize, wall clock) and the
forced flush after it, per launch, as medians over rounds of the differences against `untimed`
with their quartiles. Without a GPU it says so in one line and exits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import no_gpu, round_orders  # noqa: E402
from profile_cost import cupy_raw_workload, torch_workload  # noqa: E402

VARIANTS = ("untimed", "outer", "every", "api")


WORKLOADS = {"torch": torch_workload, "cupy-raw": cupy_raw_workload}


def switch(callbacks, cupti, variant: str, on: bool) -> None:
    """Turn `variant`'s timing on or off in the running session."""
    if variant == "outer":
        callbacks.time_outer_launches(on)
    elif variant == "every":
        callbacks.time_launches(on)
    elif variant == "api":
        for kind in (cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
            (cupti.activity_enable if on else cupti.activity_disable)(kind)


def measure(session, launch, synchronize, rounds: int, batch: int) -> dict[str, list]:
    from cupti import cupti

    callbacks = session.collector._callbacks
    callbacks.time_launches(False)
    callbacks.time_outer_launches(False)
    loops: dict[str, list[float]] = {v: [] for v in VARIANTS}
    flushes: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for order in round_orders(VARIANTS, rounds):
        for variant in order:
            switch(callbacks, cupti, variant, True)
            launch()
            synchronize()
            session.collector.flush()
            start = time.perf_counter_ns()
            for _ in range(batch):
                launch()
            synchronize()
            loops[variant].append((time.perf_counter_ns() - start) / batch)
            start = time.perf_counter_ns()
            session.collector.flush()
            flushes[variant].append((time.perf_counter_ns() - start) / batch)
            switch(callbacks, cupti, variant, False)
    return {"loops": loops, "flushes": flushes}


def added(samples: list[float], base: list[float]) -> str:
    diffs = sorted(a - b for a, b in zip(samples, base, strict=True))
    q = statistics.quantiles(diffs, n=4)
    return f"{statistics.median(diffs):+.1f} ns [{q[0]:+.1f}, {q[2]:+.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--only", default=",".join(WORKLOADS))
    args = parser.parse_args()
    missing = no_gpu()
    if missing:
        print(f"verdict_cost: skipped, {missing}")
        return
    import kname
    from kname.profiling.session import ProfileSession

    kname.install()
    session = ProfileSession()
    if not session.start():
        raise SystemExit("kname profile could not start CUPTI here")
    print(f"{args.rounds} rounds of {args.batch} launches; per launch, medians [quartiles]")
    for name in args.only.split(","):
        try:
            launch, synchronize = WORKLOADS[name]()
        except Exception as exc:  # a library missing on this machine
            print(f"{name}: skipped ({type(exc).__name__}: {exc})")
            continue
        result = measure(session, launch, synchronize, args.rounds, args.batch)
        loops, flushes = result["loops"], result["flushes"]
        base = statistics.median(loops["untimed"])
        print(f"{name}: untimed loop {base:.0f} ns per launch")
        for variant in VARIANTS[1:]:
            print(
                f"  {variant:6} loop {added(loops[variant], loops['untimed'])}; flush "
                f"{added(flushes[variant], flushes['untimed'])}"
            )
    session.stop()


if __name__ == "__main__":
    main()
