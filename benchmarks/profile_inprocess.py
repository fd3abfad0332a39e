"""kname profile's whole-program cost, measured inside one process: blocks of the mixed
program's iterations with profiling on and off, many short blocks interleaved.

    python benchmarks/profile_inprocess.py [--rounds 400] [--iterations 20] [--max-seconds 40]
        [--warm 3] [--settle 100] [--json OUT] [--repo CHECKOUT] [--no-proton] [--noop]
        [--lines] [--split] [--also VARIANT,...] [--counts] [--phase all|kname|proton]

Whole processes on the GPU hosts swing 1.7-2x for the same loop (docs/benchmarks.md), far more
than the microsecond a launch that the budget speaks of. Here one process imports the libraries
once (mixed_program.workloads: numba-cuda, CuPy, torch, Triton, each that starts), and each
round runs one block of each variant, in a new order each round:

- `off`, `off-again`: kname.disable()d, nothing profiling; the pair's difference (A/A) is the
  method's own spread, the floor under which no other difference means anything;
- `floor`: CUPTI's floor (cupti_floor.CallbackFloor and the activity kinds kname profile
  enables), kname disabled;
- `kname`: kname.enable()d and a kname.profile() session started (as `kname profile --json`
  collects, in process);
- then, in a second phase, in a process of its own (`--phase proton`: CUPTI takes one
  subscriber a process, and once kname's or the floor's has been there Proton's is refused):
  `off`, `off-again` and `proton` (triton.profiler, context="python", deactivated between its
  blocks).

A block: the variant started (untimed), `--warm` untimed iterations (a started session builds
its sites anew), `--settle` more where kname's patches changed since the last block that
settled (kname enabled or disabled, by this block's start or an earlier block's stop: each such
change undoes CPython's specialised instructions that read the patched classes, which then miss
until they have run some 60 times; a program that enables kname once never pays that, and at
3 untimed iterations every session variant did), a
synchronisation, then `--iterations` timed by the launching thread's CPU time
(time.thread_time_ns, the loop alone) and by the wall clock (the loop and a synchronisation),
then the variant stopped. Per
round, each variant's difference to that round's `off` block, per GPU launch; the median over
rounds and its 95% interval (order statistics of the median), beside the A/A pair's. `--noop`
runs the same harness on the CPU with the no-op target in place of the GPU libraries (no floor,
no profile: a check of the harness; with `--split`, every variant, CUPTI played by the tests'
stand-in). `--lines` also times each line of the loop apart (the
timer's own cost the same in every variant) and gives each variant's added µs per iteration
per line: where kname's cost above the floor goes. `--split` adds a variant per piece of kname's
cost, each switched on over the one without it (SPLIT_STEPS: CUPTI's records and a subscriber,
an empty callback on kname's launch APIs, cuptiSubscribe_v2, the graph resource callbacks,
kname's recorder with its bookkeeping alone and with each site looked up from the frame, kname's
wrappers (kept in the call path: `kname-wrapped`, as before kname.profiling.wrappers took them
out), torch's forward lines; kname enabled and disabled before a block; and kname's naming over
the floor) and gives each piece's µs per launch, paired by round, with CUPTI's callbacks an
iteration by domain; `--also NAME,...` adds some of them alone (`--also kname-wrapped`: kname
with its library wrappers kept, as before kname.profiling.wrappers, beside it). `--counts`
adds, per variant, the recorder's site look-ups in Python (and its GIL and lock takes, with
tests/support/lock_counter.c preloaded) an iteration. GPU launches per iteration are counted by
kname's session (its launch API calls), else taken as the loop's lines.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


class Variant:
    """A way of running a block: start() and stop() around it, untimed."""

    def __init__(self, name: str, start: Callable[[], None], stop: Callable[[], None]):
        self.name, self.start, self.stop = name, start, stop


# kname's changes made or undone (enable() or disable() that changed its state), and how many
# of them the last settled block had seen: a block after one settles first (run_block).
TOGGLES = [0, 0]
RAN = [0]  # iterations the running block ran so far, untimed ones included (a session counts)


def set_enabled(on: bool) -> None:
    """kname.enable() or kname.disable(), counted in TOGGLES where the state changed: each such
    call sets or restores kname's patches on the libraries' classes, and CPython's specialised
    instructions that read those classes miss until they specialise again (~60 runs each)."""
    import kname

    if kname.is_enabled() != on:
        TOGGLES[0] += 1
    (kname.enable if on else kname.disable)()


# --counts: {what is counted: its count so far}, read around each timed loop; and per variant,
# each count's sum over its timed blocks, with the iterations they ran.
COUNTERS: dict[str, Callable[[], int]] = {}
COUNTED: dict[str, dict[str, int]] = {}


def run_block(variant: Variant, loop, sync, warm: int, iterations: int, settle: int = 0) -> tuple:
    """One block of `variant`: (thread CPU ns of the timed loop, wall ns of it and its sync),
    and each line's ns where `loop` times its lines (loop.lines: then it returns them). `settle`
    untimed iterations more where kname's patches changed since the last block that settled
    (this one's start, or an earlier block's stop): a program that enables kname once never
    pays the misses of the interpreter's specialisations that each change undoes."""
    variant.start()
    RAN[0] = warm + iterations
    try:
        loop(warm)
        if TOGGLES[0] != TOGGLES[1]:
            loop(settle)
            TOGGLES[1] = TOGGLES[0]
            RAN[0] += settle
        sync()
        before = {name: read() for name, read in COUNTERS.items()}
        wall0, cpu0 = time.perf_counter_ns(), time.thread_time_ns()
        by_line = loop(iterations)
        cpu = time.thread_time_ns() - cpu0
        sync()
        wall = time.perf_counter_ns() - wall0
        counted = COUNTED.setdefault(variant.name, {"iterations": 0})
        counted["iterations"] += iterations
        for name, read in COUNTERS.items():
            counted[name] = counted.get(name, 0) + read() - before[name]
    finally:
        variant.stop()
    return (cpu, wall) if by_line is None else (cpu, wall, by_line)


def count_slow_work() -> None:
    """--counts: the recorder's site look-ups in Python (capture.site_of_frame, its slow path)
    and, where tests/support/lock_counter.c is preloaded, its GIL takes and lock takes."""
    import ctypes

    from kname.profiling import native_callback

    calls = [0]
    look_up = native_callback.site_of_frame

    def counted_site_of_frame(frame):
        calls[0] += 1
        return look_up(frame)

    native_callback.site_of_frame = counted_site_of_frame  # recorders made from now on
    COUNTERS["site_of_frame"] = lambda: calls[0]
    preloaded = ctypes.CDLL(None)
    for name in ("gil_takes_counted", "locks_counted"):
        read = getattr(preloaded, name, None)
        if read is not None:
            read.restype = ctypes.c_long
            total = [0]

            def running(read=read, total=total) -> int:  # the counter starts afresh at each read
                total[0] += read()
                return total[0]

            COUNTERS[name.removesuffix("_counted")] = running


def render_counts(counted: dict) -> list[str]:
    """Per variant, each count an iteration of its timed blocks (empty without --counts)."""
    names = sorted({name for row in counted.values() for name in row} - {"iterations"})
    if not names:
        return []
    out = ["", "| variant | " + " | ".join(f"{n} an iteration" for n in names) + " |",
           "| --- |" + " ---: |" * len(names)]  # fmt: skip
    for variant, row in counted.items():
        cells = " | ".join(f"{row.get(n, 0) / max(1, row['iterations']):.2f}" for n in names)
        out.append(f"| {variant} | {cells} |")
    return out


def interleaved(variants: list[Variant], loop, sync, args, deadline: float, notes: list) -> dict:
    """{variant: [(cpu, wall) per round]}, rounds in a new order each, until `deadline`; a
    variant that fails its first (untimed) block is left out, said in `notes`."""
    working = []
    for variant in variants:  # once each, untimed: every variant's first start is apart
        try:
            run_block(variant, loop, sync, args.warm, args.iterations, args.settle)
            working.append(variant)
        except Exception as exc:
            notes.append(f"{variant.name} left out: {type(exc).__name__}: {exc}"[:300])
    samples: dict[str, list[tuple[int, int]]] = {v.name: [] for v in working}
    order, shuffle = list(working), random.Random(0).shuffle
    for _ in range(args.rounds):
        if time.monotonic() > deadline:
            break
        shuffle(order)
        try:
            blocks = [
                (v.name, run_block(v, loop, sync, args.warm, args.iterations, args.settle))
                for v in order
            ]
        except Exception as exc:  # a round is whole or not kept
            notes.append(f"rounds stopped: {type(exc).__name__}: {exc}"[:300])
            break
        for name, block in blocks:
            samples[name].append(block)
    return samples


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """The median and its distribution-free 95% interval (order statistics)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return math.nan, math.nan, math.nan
    half = 1.96 * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half))
    return statistics.median(ordered), ordered[low], ordered[high]


def paired(with_it: list, without: list, launches: int) -> dict:
    """Per clock: the per-round difference of two variants' blocks, µs per launch (median and
    its 95% interval), over the rounds both have."""
    rounds = min(len(with_it), len(without))
    row: dict = {"rounds": rounds}
    for index, clock in enumerate(("cpu", "wall")):
        pairs = zip(with_it[:rounds], without[:rounds], strict=True)
        diffs = [(a[index] - b[index]) / launches / 1000 for a, b in pairs]
        median, low, high = median_interval(diffs)
        row[clock] = {"added_us": median, "low_us": low, "high_us": high}
    return row


def added(samples: dict, launches: int, base: str = "off") -> dict:
    """Per variant and clock: the per-round difference to `base`, µs per launch."""
    rows = {}
    for name, blocks in samples.items():
        if name == base:
            continue
        row = paired(blocks, samples[base], launches)
        for index, clock in enumerate(("cpu", "wall")):
            row[clock]["off_us"] = (
                statistics.median(b[index] for b in samples[base]) / launches / 1000
            )
        rows[name] = row
    return rows


# --- the variants ---------------------------------------------------------------------------


def added_by_line(samples: dict, lines: list[str], iterations: int, base: str = "off") -> dict:
    """Per variant and line: the per-round difference to `base`, µs per iteration (wall clock,
    each line timed apart: the timer's own cost is the same in every variant)."""
    rows: dict = {}
    for name, blocks in samples.items():
        rounds = min(len(blocks), len(samples[base]))
        if name == base or not rounds or len(blocks[0]) < 3:
            continue
        pairs = list(zip(blocks[:rounds], samples[base][:rounds], strict=True))
        rows[name] = {
            line: median_interval([(b[2][i] - o[2][i]) / iterations / 1000 for b, o in pairs])[0]
            for i, line in enumerate(lines)
        }
    return rows


def off_variant(name: str) -> Variant:
    return Variant(name, lambda: set_enabled(False), lambda: None)


def kname_variant(
    counted: list[float],
    name: str = "kname",
    forward_lines: bool = True,
    wrappers: bool = True,
    patched: bool = True,
    keep_wrappers: bool = False,
) -> Variant:
    """kname enabled, a profile session collecting; `counted` gets each block's launch calls an
    iteration. With `keep_wrappers`: the session keeps kname's library launch wrappers in the
    call path (kname.profiling.wrappers; a kname without that choice always keeps them).
    Without `forward_lines`: the session's forward lines (backward.collect: torch's mode) off;
    without `wrappers`: kname's launch wrappers pass their launches through (the install's
    switch off, nothing unpatched), so the callback names those from the frame too; without
    `patched`: kname disabled once the session started (every change it made undone: no wrapper
    in the call path, every site from the frame)."""
    import kname
    from kname import lifecycle
    from kname.profiling import backward
    from kname.profiling.session import ProfileSession

    session: list = []

    def new_session():
        if not keep_wrappers:
            return kname.profile()  # its install lends it the wrappers, to take out
        try:
            return ProfileSession(keep_wrappers=True)
        except TypeError:  # a kname that always keeps them (--repo)
            return ProfileSession()

    def start() -> None:
        set_enabled(True)
        session.append(new_session())
        if not session[-1].start():
            raise RuntimeError(f"kname profile did not start: {session[-1].not_collected}")
        WRAPPERS_OUT[name] = getattr(session[-1], "wrappers_out", False)
        if not forward_lines:
            backward.collect(None)
        if not wrappers:
            lifecycle._state.switch.on = False
        if not patched:
            set_enabled(False)

    def stop() -> None:
        lifecycle._state.switch.on = True
        current = session.pop()
        current.stop()
        counted.append(getattr(current.join, "launch_count", 0) / max(1, RAN[0]))
        set_enabled(False)

    return Variant(name, start, stop)


def recorder_variant(name: str, marked: bool, toggled: bool = False) -> Variant:
    """kname's C recorder through its collector alone (CUPTI subscribed as kname profile does,
    the records read and joined in C), kname disabled (no wrapper names a launch), no session;
    `marked`: this thread's launches take a site set once (the callback's bookkeeping alone, no
    look-up of the frame); `toggled`: kname enabled and disabled again first, as the session
    variants are (its changes made and undone: the interpreter's specialisations of the
    patched classes undone, as in those blocks)."""
    from kname.profiling.capture import LaunchCapture
    from kname.profiling.cupti_collector import CuptiCollector
    from kname.profiling.join import Join

    held: list = []

    def start() -> None:
        if toggled:
            set_enabled(True)
        set_enabled(False)
        join = Join()
        collector = CuptiCollector(LaunchCapture(join, None), join)
        held.append(collector)
        if not collector.start():
            raise RuntimeError(f"the collector did not start: {collector.not_started}")
        recorder = getattr(collector._callbacks, "recorder", None)
        if recorder is None:
            raise RuntimeError(f"no native recorder: {collector.launch_callbacks}")
        if marked:
            recorder.mark("inprocess: marked")

    def stop() -> None:
        collector = held.pop()
        recorder = getattr(collector._callbacks, "recorder", None)
        if marked and recorder is not None:
            recorder.unmark()
        collector.stop()

    return Variant(name, start, stop)


def floor_variant(
    library: Path | None,
    name: str = "floor",
    naming: bool = False,
    without_kinds: tuple[str, ...] = (),
    **parts: bool,
) -> Variant:
    """CUPTI's floor (`parts`: CallbackFloor's, the pieces of kname's subscription), kname
    disabled; with `naming`, kname enabled over it (its wrappers name their launches); the
    activity kinds kname profile enables, but `without_kinds`."""

    sys.path.insert(0, str(BENCH_DIR))
    from cupti import cupti
    from cupti_floor import CallbackFloor

    from kname.profiling.cupti_collector import ACTIVITY_KINDS

    floor = CallbackFloor(library, **parts)
    kinds = [getattr(cupti.ActivityKind, k) for k in ACTIVITY_KINDS if k not in without_kinds]

    def start() -> None:
        set_enabled(naming)
        floor.start(cupti)
        for kind in kinds:
            cupti.activity_enable(kind)

    def stop() -> None:
        cupti.activity_flush_all(1)
        for kind in kinds:
            cupti.activity_disable(kind)
        floor.stop()
        set_enabled(False)
        calls = floor.calls()
        each = {domain: count / max(1, RAN[0]) for domain, count in calls.items()}
        FLOOR_CALLS.setdefault(name, []).append(each)

    return Variant(name, start, stop)


# Per session variant, whether its last session took the library launch wrappers out.
WRAPPERS_OUT: dict[str, bool] = {}

# Per floor variant, the callbacks CUPTI made to it in each block, by domain, an iteration of
# the block (its untimed ones too).
FLOOR_CALLS: dict[str, list[dict[str, float]]] = {}


def callbacks_per_iteration() -> dict:
    """Per floor variant and domain: CUPTI's callbacks an iteration (median over its blocks)."""
    return {
        name: {domain: statistics.median(b[domain] for b in blocks) for domain in blocks[0]}
        for name, blocks in FLOOR_CALLS.items()
    }


# --split: each piece of kname's cost switched on over the variant without it, as (what it
# adds, the variant with it, the variant without).
SPLIT_STEPS = (
    ("CUPTI's records and a subscriber", "floor-subscribed", "off"),
    ("an empty callback on kname's launch APIs", "floor", "floor-subscribed"),
    ("subscribed by name (cuptiSubscribe_v2)", "floor-v2", "floor"),
    ("the graph resource callbacks, empty", "floor-graphs", "floor"),
    ("the least a recorder does: each call's id kept on its thread", "floor-recording", "floor"),
    ("kname's callback: bookkeeping, records read in C", "recorder-marked", "floor"),
    ("the site looked up from the frame", "recorder", "recorder-marked"),
    (
        "kname enabled and disabled before the block (specialisations undone)",
        "recorder-toggled",
        "recorder",
    ),
    ("kname's wrappers and site calls (kept)", "kname-no-forward", "recorder"),
    ("the session beyond the collector (wrappers passing through)", "kname-unwrapped", "recorder"),
    ("kname's wrappers naming their launches in a session", "kname-no-forward", "kname-unwrapped"),
    ("the library launch wrappers kept in the call path", "kname-wrapped", "kname"),
    ("the session beyond the collector (library wrappers out)", "kname", "recorder"),
    (
        "kname's changes in the call path (a session without them: unpatched)",
        "kname",
        "kname-unpatched",
    ),
    ("torch's forward lines (the mode)", "kname-wrapped", "kname-no-forward"),
    ("kname's naming over the floor alone", "floor+naming", "floor"),
    ("external correlation records enabled, none pushed", "floor", "floor-no-external"),
)


def split_variants(library: Path | None, counted: list[float]) -> dict[str, Callable[[], Variant]]:
    """The makers of the split's variants, beyond off, floor and kname, by name."""
    return {
        "floor-subscribed": lambda: floor_variant(library, "floor-subscribed", launches=False),
        "floor-v2": lambda: floor_variant(library, "floor-v2", named=True),
        "floor-graphs": lambda: floor_variant(library, "floor-graphs", graphs=True),
        "floor-recording": lambda: floor_variant(library, "floor-recording", recording=True),
        "floor+naming": lambda: floor_variant(library, "floor+naming", naming=True),
        "floor-no-external": lambda: floor_variant(
            library, "floor-no-external", without_kinds=("EXTERNAL_CORRELATION",)
        ),
        "recorder-marked": lambda: recorder_variant("recorder-marked", marked=True),
        "recorder": lambda: recorder_variant("recorder", marked=False),
        "recorder-toggled": lambda: recorder_variant(
            "recorder-toggled", marked=False, toggled=True
        ),
        "kname-wrapped": lambda: kname_variant(counted, "kname-wrapped", keep_wrappers=True),
        "kname-no-forward": lambda: kname_variant(
            counted, "kname-no-forward", forward_lines=False, keep_wrappers=True
        ),
        "kname-unwrapped": lambda: kname_variant(
            counted, "kname-unwrapped", forward_lines=False, wrappers=False, keep_wrappers=True
        ),
        "kname-unpatched": lambda: kname_variant(counted, "kname-unpatched", patched=False),
    }


def step_costs(samples: dict, launches: int, steps: tuple = SPLIT_STEPS) -> dict:
    """Per step and clock: the per-round difference of its two variants, µs per launch."""
    return {
        label: {"with": with_it, "without": without}
        | paired(samples[with_it], samples[without], launches)
        for label, with_it, without in steps
        if with_it in samples and without in samples
    }


def proton_variant(out: Path) -> tuple[Variant, Callable[[], None]]:
    import triton.profiler as proton

    import kname

    kname.disable()
    session = proton.start(str(out / "proton"), context="python")
    proton.deactivate(session)

    def start() -> None:
        proton.activate(session)

    def stop() -> None:
        proton.deactivate(session)

    return Variant("proton", start, stop), proton.finalize


# --- the program ----------------------------------------------------------------------------


def gpu_program(folder: Path, by_line: bool) -> tuple[Callable, Callable, dict, dict]:
    """The mixed program's loop (with `by_line`, one that times each line and returns their
    ns), its synchronisation, its lines and the libraries it skipped."""
    import mixed_program

    ns: dict = {"N": mixed_program.N, "BLOCK": mixed_program.BLOCK}
    lines, skipped = mixed_program.workloads(ns)
    loop, timed_lines, _ = mixed_program.write_loop(folder, lines, ns)
    if by_line:
        loop = _line_timer(timed_lines, len(lines))
    return loop, lambda: mixed_program.synchronize(ns), lines, skipped


def _line_timer(timed_lines: Callable, count: int) -> Callable[[int], list[int]]:
    def loop(iterations: int) -> list[int]:
        spent = [0] * count
        timed_lines(iterations, spent)
        return spent

    return loop


def noop_program(folder: Path, by_line: bool) -> tuple[Callable, Callable, dict, dict]:
    """The same harness's program on the CPU: two launches of the no-op target an iteration."""
    import bench_noop_target as target
    import mixed_program

    import kname

    kname.install(targets=["bench_noop_target:launch"])
    lines = {"noop-1": "target.launch(1)", "noop-2": "target.launch(2)"}
    loop, timed_lines, _ = mixed_program.write_loop(folder, lines, {"target": target})
    if by_line:
        loop = _line_timer(timed_lines, len(lines))
    return loop, lambda: None, lines, {}


# The stand-in's launch object of a class kname patches, as numba-cuda's launch configuration
# and Triton's JITFunction are: its __call__ (wrapped) reads the object's attributes on the way
# to the launch API, each read an instruction CPython specialises for the class.
LAUNCHER_CLASS = """

class Launcher:
    def __init__(self):
        self.grid, self.block, self.stream, self.shared = 1, 256, 0, 0

    def __call__(self):
        return launch_api(self.grid, self.block, self.stream, self.shared)


def launch_api(*configuration):
    NEXT[0] += 1
    LIBRARY.fake_callback(1, 307, 0, NEXT[0])
    LIBRARY.fake_callback(1, 307, 1, NEXT[0])
"""


def stand_in_program(folder: Path, by_line: bool) -> tuple[Callable, Callable, dict, dict]:
    """--noop --split: the split's variants on the CPU, CUPTI played by the tests' stand-in
    (profile_cpu.stand_in): a launch kname wraps, one through a class whose method kname wraps
    (LAUNCHER_CLASS), and one it does not, each the stand-in's launch callback at enter and exit
    (as CUPTI calls a subscriber around cuLaunchKernel)."""
    import itertools

    import mixed_program
    import profile_cpu

    import kname

    cupti = profile_cpu.stand_in(folder)
    # The floor's buffers are its library's (in C): flushed there, not through the binding.
    sys.modules["cupti"].cupti.activity_flush_all = cupti.library.cuptiActivityFlushAll
    (folder / "bench_profiled_target.py").write_text(profile_cpu.TARGET + LAUNCHER_CLASS)
    sys.path.insert(0, str(folder))
    import bench_profiled_target as target

    target.LIBRARY = cupti.library
    kname.install(
        targets=["bench_profiled_target:launch", "bench_profiled_target:Launcher.__call__"]
    )
    callback = "c = next(ids); lib.fake_callback(1, 307, 0, c); lib.fake_callback(1, 307, 1, c)"
    lines = {
        "wrapped": "target.launch()",
        "a patched class": "launcher()",
        "at the launch API": callback,
    }
    ns = {
        "target": target,
        "launcher": target.Launcher(),
        "lib": cupti.library,
        "ids": itertools.count(1 << 30),
    }
    loop, timed_lines, _ = mixed_program.write_loop(folder, lines, ns)
    if by_line:
        loop = _line_timer(timed_lines, len(lines))
    return loop, lambda: None, lines, {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--iterations", type=int, default=20, help="timed iterations a block")
    parser.add_argument("--warm", type=int, default=3, help="untimed iterations a block")
    parser.add_argument(
        "--settle", type=int, default=100,
        help="untimed iterations more in a block after kname's patches changed",
    )  # fmt: skip
    parser.add_argument("--max-seconds", type=float, default=40.0)
    parser.add_argument("--json")
    parser.add_argument("--repo", help="import kname from this checkout (default: this one)")
    parser.add_argument("--floor-library", help="a built cupti_callback_floor.c")
    parser.add_argument("--launches", type=int, help="GPU launches an iteration (Proton's phase)")
    parser.add_argument("--no-proton", action="store_true")
    parser.add_argument("--noop", action="store_true", help="the harness on the CPU, no GPU")
    parser.add_argument("--lines", action="store_true", help="also time each line apart")
    parser.add_argument(
        "--also", default="",
        help="some of the split's variants (comma-separated names), with its pieces they make",
    )  # fmt: skip
    parser.add_argument(
        "--counts", action="store_true",
        help="count the site look-ups in Python (and GIL and lock takes, with "
        "tests/support/lock_counter.c preloaded) an iteration, per variant",
    )  # fmt: skip
    parser.add_argument(
        "--split", action="store_true",
        help="kname's cost piece by piece (with --noop: on the tests' stand-in CUPTI)",
    )  # fmt: skip
    parser.add_argument(
        "--phase", choices=("all", "kname", "proton"), default="all",
        help="all: kname's phase here, then Proton's in a process of its own (CUPTI keeps one "
        "subscriber a process)",
    )  # fmt: skip
    args = parser.parse_args()
    started = time.monotonic()
    repo = Path(args.repo).resolve() if args.repo else BENCH_DIR.parent
    sys.path[:0] = [str(repo), str(BENCH_DIR)]
    import kname

    kname.install()  # before the libraries: their launches are wrapped as they are imported
    folder = Path(tempfile.mkdtemp(prefix="kname-inprocess-"))
    make_program = gpu_program
    if args.noop:
        make_program = stand_in_program if args.split or args.also else noop_program
    loop, sync, lines, skipped = make_program(folder, args.lines)
    if args.counts:
        count_slow_work()
    loop(20)  # compiles, sites built
    sync()
    result: dict = {"repo": str(repo), "lines": list(lines), "skipped": skipped, "notes": []}
    result.update(iterations=args.iterations, warm=args.warm)
    counted: list[float] = []
    if args.phase == "proton":
        result["phase_proton"] = proton_phase(folder, loop, sync, args, started, result)
        return finish(result, args, started)
    variants = [off_variant("off"), off_variant("off-again")]
    if not args.noop or args.split or args.also:
        library = floor_library(args)
        makers = [lambda: floor_variant(library), lambda: kname_variant(counted)]
        more = split_variants(library, counted)
        chosen = list(more) if args.split else [n for n in args.also.split(",") if n]
        for name in [n for n in chosen if n not in more]:
            result["notes"].append(f"no variant {name!r}: {', '.join(more)}")
        for make in makers + [more[name] for name in chosen if name in more]:
            try:
                variants.append(make())
            except Exception as exc:
                result["notes"].append(f"a variant left out: {type(exc).__name__}: {exc}")
    else:
        variants.append(Variant("kname", lambda: set_enabled(True), lambda: set_enabled(False)))
    proton = not args.noop and not args.no_proton and args.phase == "all"
    share = 0.6 if proton else 1.0
    budget = args.max_seconds - (time.monotonic() - started)
    deadline = time.monotonic() + budget * share
    samples = interleaved(variants, loop, sync, args, deadline, result["notes"])
    per_iteration = max(1, len(lines))
    if counted and counted[-1]:
        per_iteration = max(1, round(counted[-1]))
    launches = args.iterations * per_iteration
    result["launches_per_iteration"] = per_iteration
    result["phase_kname"] = added(samples, launches)
    if args.lines:
        result["lines_kname"] = added_by_line(samples, list(lines), args.iterations)
    result["callbacks_per_iteration"] = callbacks_per_iteration()
    result["wrappers_out"] = dict(WRAPPERS_OUT)
    if args.split or args.also:
        result["split"] = step_costs(samples, launches)
    if COUNTED and COUNTERS:
        result["counts"] = COUNTED
    if proton:
        seconds = args.max_seconds - (time.monotonic() - started)
        result["phase_proton"] = proton_process(seconds, per_iteration, args, result["notes"])
    return finish(result, args, started)


def floor_library(args) -> Path | None:
    """The floor's library, built once for every floor variant (None: each builds its own)."""
    if args.floor_library:
        return Path(args.floor_library)
    if not args.split:
        return None
    from cupti_floor import build

    return build()


def finish(result: dict, args, started: float) -> int:
    result["load_average"] = list(os.getloadavg())
    result["seconds"] = time.monotonic() - started
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def proton_phase(folder: Path, loop, sync, args, started: float, result: dict) -> dict:
    """off, off again and Proton in blocks, in this process (its CUPTI subscriber is Proton's)."""
    per_iteration = args.launches or max(1, len(result["lines"]))
    result["launches_per_iteration"] = per_iteration
    try:
        variant, finalize = proton_variant(folder)
        deadline = started + args.max_seconds
        samples = interleaved(
            [off_variant("off"), off_variant("off-again"), variant],
            loop, sync, args, deadline, result["notes"],
        )  # fmt: skip
        finalize()
        return added(samples, args.iterations * per_iteration)
    except Exception as exc:
        result["notes"].append(f"Proton left out: {type(exc).__name__}: {exc}"[:300])
        return {}


def proton_process(seconds: float, per_iteration: int, args, notes: list) -> dict:
    """Proton's phase in a process of its own (its rows, {} with a note when it did not run)."""
    if seconds < 10:
        notes.append(f"Proton left out: {seconds:.0f} s left")
        return {}
    out = Path(tempfile.mkdtemp(prefix="kname-proton-")) / "proton.json"
    command = [
        sys.executable, __file__, "--phase", "proton", "--max-seconds", f"{seconds - 2:.0f}",
        "--iterations", str(args.iterations), "--warm", str(args.warm), "--rounds",
        str(args.rounds), "--launches", str(per_iteration), "--json", str(out),
    ]  # fmt: skip
    if args.repo:
        command += ["--repo", args.repo]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 30)
    if not out.exists():
        notes.append(f"Proton's process exited {done.returncode}: {done.stderr[-300:]}")
        return {}
    proton = json.loads(out.read_text())
    notes += proton["notes"]
    return proton.get("phase_proton", {})


def render(result: dict) -> str:
    out = [
        f"in-process whole program: {', '.join(result['lines'])}; "
        f"{result['launches_per_iteration']} launches an iteration, "
        f"{result['iterations']} a block",
        "| phase | variant | rounds | CPU: added µs/launch [95%] | wall: added µs/launch [95%] |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for phase in ("phase_kname", "phase_proton"):
        for name, row in result.get(phase, {}).items():
            cells = [
                f"{row[c]['added_us']:+.2f} [{row[c]['low_us']:+.2f}, {row[c]['high_us']:+.2f}]"
                for c in ("cpu", "wall")
            ]
            out.append(f"| {phase[6:]} | {name} | {row['rounds']} | {cells[0]} | {cells[1]} |")
    kname_row, floor_row = (result.get("phase_kname", {}).get(k) for k in ("kname", "floor"))
    if kname_row and floor_row:
        for clock in ("cpu", "wall"):
            above = kname_row[clock]["added_us"] - floor_row[clock]["added_us"]
            out.append(f"kname above CUPTI's floor ({clock}): {above:+.2f} µs/launch")
    for name, out_of_path in result.get("wrappers_out", {}).items():
        out.append(f"{name}: library launch wrappers out of the call path: {out_of_path}")
    for name, by_domain in result.get("callbacks_per_iteration", {}).items():
        said = ", ".join(f"{domain} {count:.1f}" for domain, count in by_domain.items())
        out.append(f"{name}: CUPTI's callbacks an iteration: {said}")
    out += render_split(result.get("split", {}))
    out += render_counts(result.get("counts", {}))
    by_line = result.get("lines_kname", {})
    if by_line:
        names = list(by_line)
        out += ["", "| line | " + " | ".join(f"{n}: added µs/iteration" for n in names) + " |",
                "| --- |" + " ---: |" * len(names)]  # fmt: skip
        for line in result["lines"]:
            cells = " | ".join(f"{by_line[n][line]:+.2f}" for n in names)
            out.append(f"| {line} | {cells} |")
    out += [f"note: {note}" for note in result["notes"]]
    return "\n".join(out)


def render_split(split: dict) -> list[str]:
    """The split's table: each piece over the variant without it (empty without --split)."""
    if not split:
        return []
    out = ["", "| piece | with / without | rounds | CPU: µs/launch [95%] | wall: µs/launch [95%] |",
           "| --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for label, row in split.items():
        cells = [
            f"{row[c]['added_us']:+.2f} [{row[c]['low_us']:+.2f}, {row[c]['high_us']:+.2f}]"
            for c in ("cpu", "wall")
        ]
        pair = f"{row['with']} / {row['without']}"
        out.append(f"| {label} | {pair} | {row['rounds']} | {cells[0]} | {cells[1]} |")
    return out


if __name__ == "__main__":
    sys.exit(main())
