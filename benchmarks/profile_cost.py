"""kname profile's cost per launch call beside CUPTI's own floor, on a GPU.

    PYTHONPATH=. KNAME_SKIP=torch python3 benchmarks/profile_cost.py

Each library step of tests/gpu/profile_demo.py (numba-cuda, CuPy, torch, Triton), kname
installed throughout, in interleaved rounds: unprofiled; with CUPTI's activity records alone
(kernels, copies, sets; no launch callback): what any CUPTI-based profiler pays; and in a kname
profile session. Prints the added time per launch call of each against the unprofiled step
(medians of 7 rounds of 20 steps). Needs cupti-python of the machine's CUDA release.
"""

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "gpu"), str(REPO)]
import profile_demo as demo  # noqa: E402
from cupti import cupti  # noqa: E402

import kname  # noqa: E402
from kname.profiling.session import ProfileSession  # noqa: E402

STEPS = 20  # per timed batch
ROUNDS = 7
ACTIVITIES = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET")


def activity_records_alone(on: bool) -> None:
    """CUPTI's activity records with no launch callback (the buffers are thrown away)."""
    kinds = [getattr(cupti.ActivityKind, name) for name in ACTIVITIES]
    if on:
        cupti.activity_register_callbacks(lambda: (8 << 20, 0), lambda activities: None)
        for kind in kinds:
            cupti.activity_enable(kind)
    else:
        for kind in kinds:
            cupti.activity_disable(kind)
        cupti.activity_flush_all(1)


def measure(step, state) -> tuple[float, dict[str, float]]:
    """(launch calls per step, {variant: seconds per batch, median})."""
    rows: dict[str, list[float]] = {"bare": [], "activity": [], "kname": []}
    calls = 0.0
    for _ in range(ROUNDS):
        step(state)
        demo.synchronize()
        rows["bare"].append(demo.timed_step(step, state, STEPS))
        activity_records_alone(True)
        step(state)
        demo.synchronize()
        rows["activity"].append(demo.timed_step(step, state, STEPS))
        activity_records_alone(False)
        session = ProfileSession()
        session.start()
        step(state)  # the session's sites are built here, untimed
        demo.synchronize()
        before = session.join.launch_count
        rows["kname"].append(demo.timed_step(step, state, STEPS))
        session.stop()
        calls = (session.join.launch_count - before) / STEPS
    return calls, {name: statistics.median(times) for name, times in rows.items()}


def main() -> None:
    kname.install()
    work = demo.Workload()
    for lib, _setup, step in demo.LIBRARIES:
        if step is None or lib not in work.states:
            continue
        calls, medians = measure(step, work.states[lib])
        added = {
            name: 1e6 * (seconds - medians["bare"]) / STEPS / max(calls, 1)
            for name, seconds in medians.items()
        }
        print(
            f"{lib}: {calls:.0f} launch calls per step; per launch call, CUPTI activity records "
            f"alone {added['activity']:+.2f} us, kname profile {added['kname']:+.2f} us"
        )


if __name__ == "__main__":
    main()
