"""kname profile's own CPU cost per launch, without a GPU: CUPTI played by the tests' stand-in.

    PYTHONPATH=. python3 benchmarks/profile_cpu.py [--rounds 30] [--batch 2000] [--clock wall]

A launch here is a Python function kname wraps (a user target) that calls the stand-in
libcupti's launch API callback (enter, then exit, as CUPTI calls a subscriber around
cuLaunchKernel) and queues the kernel's record, as a wrapped GPU launch does under CUPTI. The
variants, interleaved in a new order every round, one session per batch:

    kname     kname installed, no profile: the stand-in's calls reach no subscriber;
    --json    a kname profile session: the site marked by the wrapper, the callback, the join;
    --trace   the same, keeping the trace (launch calls timed, records kept in C).

Per launch, against the kname variant: the launch loop, and the session's stop (CUPTI's buffers
flushed: the records read and joined); for --trace, writing its JSON, per launch. What this
leaves out is CUPTI's own work (profile_cost.py's floor on a GPU) and the library's launch: it
is kname's part of the cost alone, on this machine. Timed by the launching thread's CPU time
(--clock thread, the default: a busy machine's other work left out) or the wall clock. Needs
kname._native_cupti (built in place) and a C compiler; says in one line what it lacks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CLOCKS, quantile, round_orders  # noqa: E402

VARIANTS = ("kname", "--json", "--trace")
TARGET = '''
"""A GPU library kname wraps: its launch is CUPTI's callback around the launch API, and a
kernel record queued."""
LIBRARY = None
NEXT = [0]


def launch():
    NEXT[0] += 1
    number = NEXT[0]
    LIBRARY.fake_callback(1, 307, 0, number)
    LIBRARY.fake_callback(1, 307, 1, number)
    LIBRARY.fake_kernel(10, number, 1000 * number, 1000 * number + 500, 7, 0, 0, 0, b"k")
'''


def missing() -> str | None:
    """Why this cannot run here, or None."""
    from support.cupti_stand_in import COMPILER

    from kname import hotpath
    from kname.config import native_requested

    native, why = hotpath.choose(native_requested()).cupti()
    if native is None:
        return f"no native CUPTI callback here ({why})"
    return None if COMPILER else "no C compiler for the stand-in libcupti"


def stand_in(scratch: Path) -> SimpleNamespace:
    """The stand-in libcupti built and put in cupti-python's and libcupti's place."""
    from support.cupti_stand_in import StandInBinding, build_fake_cupti, stand_in_library

    from kname.profiling import native_callback

    built, _ = build_fake_cupti(scratch)
    sys.modules["cupti"] = SimpleNamespace(cupti=StandInBinding())  # type: ignore[assignment]
    native_callback.libcupti_path = lambda: str(built)
    return SimpleNamespace(library=stand_in_library(built), path=str(built))


def timed_batch(variant: str, launch, batch: int, clock) -> dict[str, float]:
    """One batch under `variant`: ns of the loop, of the stop, of the trace's JSON."""
    import kname

    session = None if variant == "kname" else kname.profile(keep_streams=variant == "--trace")
    if session is not None:
        session.start()
    start = clock()
    for _ in range(batch):
        launch()
    loop = clock() - start
    times = {"loop": loop, "stop": 0.0, "write": 0.0}
    if session is not None:
        start = clock()
        session.stop()
        times["stop"] = clock() - start
        if variant == "--trace":
            start = clock()
            session._trace_text()
            times["write"] = clock() - start
    return times


def measure(launch, rounds: int, batch: int, clock) -> dict[str, dict[str, list[float]]]:
    """Per variant and part, ns per launch for each round (a warm-up batch of each first)."""
    for variant in VARIANTS:
        timed_batch(variant, launch, batch, clock)
    taken = {v: {"loop": [], "stop": [], "write": []} for v in VARIANTS}
    for order in round_orders(VARIANTS, rounds):
        for variant in order:
            for part, ns in timed_batch(variant, launch, batch, clock).items():
                taken[variant][part].append(ns / batch)
    return taken


def render(taken: dict, command: str, hot_path: str) -> str:
    """The table: per variant, the loop's added ns per launch (median [lower, upper quartile] of
    the per-round differences to the kname variant), the stop's and the trace's JSON per launch."""
    base = taken["kname"]["loop"]
    lines = [
        "## kname profile's own CPU cost per launch (CUPTI played by the stand-in)",
        "",
        f"`{command}`: {len(base)} rounds; the launch wrapper: {hot_path}. Added: ns per launch "
        "over kname without a profile, median [lower, upper quartile] of per-round differences.",
        "",
        "| variant | launch loop | added in the loop | stop (flush, read, join) | trace JSON |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for variant in VARIANTS:
        parts = taken[variant]
        loop = statistics.median(parts["loop"])
        if variant == "kname":
            added = "—"
        else:
            diffs = [v - b for v, b in zip(parts["loop"], base, strict=True)]
            added = (
                f"{statistics.median(diffs):+.0f} [{quantile(diffs, 0.25):+.0f}, "
                f"{quantile(diffs, 0.75):+.0f}] ns"
            )
        stop = f"{statistics.median(parts['stop']):.0f} ns" if variant != "kname" else "—"
        write = f"{statistics.median(parts['write']):.0f} ns" if variant == "--trace" else "—"
        lines.append(f"| {variant} | {loop:.0f} ns | {added} | {stop} | {write} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--clock", choices=CLOCKS, default="thread")
    args = parser.parse_args()
    why = missing()
    if why:
        print(f"profile_cpu: skipped, {why}")
        return
    import kname
    from kname import hotpath

    with tempfile.TemporaryDirectory(prefix="kname-profile-cpu-") as scratch:
        cupti = stand_in(Path(scratch))
        (Path(scratch) / "bench_profiled_target.py").write_text(TARGET)
        sys.path.insert(0, scratch)
        import bench_profiled_target as target

        target.LIBRARY = cupti.library
        kname.install(targets=["bench_profiled_target:launch"])
        taken = measure(target.launch, args.rounds, args.batch, getattr(time, CLOCKS[args.clock]))
    why_python = hotpath.current().why_python
    path = f"pure Python ({why_python})" if why_python else "C (kname._native)"
    command = " ".join(["python benchmarks/profile_cpu.py", *sys.argv[1:]])
    print(render(taken, command, path), end="")


if __name__ == "__main__":
    main()
