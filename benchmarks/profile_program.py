"""kname profile on a whole program: what it costs there, beside CUPTI's floor and Proton.

    PYTHONPATH=. python3 benchmarks/profile_program.py [--rounds 5] [--iterations 1500]
        [--max-seconds 330] [--breakdown] [--json OUT]
    python3 benchmarks/profile_program.py --table OUT    # a saved run's table again (no GPU)

benchmarks/mixed_program.py (a launch-bound loop of every library kname covers that is installed,
about nine GPU launches an iteration) is run as whole processes, the variants interleaved in a new
order every round (one process each):

    unprofiled        the program alone;
    unprofiled again  the same: an A/A pair, the host's spread (what "added" means by chance);
    CUPTI floor       CUPTI's activity records plus an empty launch callback on kname profile's
                      launch APIs (cupti_callback_floor.c), started before the GPU libraries;
    kname --json      `kname profile --json P -- python mixed_program.py`;
    kname --trace     `kname profile --json P --trace T -- ...`;
    Proton            triton.profiler, context="python" (where Triton has it).

Each program times its loop (after untimed warm-up iterations) and a synchronize; the runner also
times each whole process. Per round, a variant's added time per GPU launch is (its loop - the
round's unprofiled loop) / the GPU launches of the loop (counted from kname's profile: its GPU
records over the iterations); printed as the lower quartile and the median over rounds, with the
whole process's median beside it. Rounds stop early when --max-seconds would be passed.

--breakdown (one more round, after): where the difference goes, per line of the program:
each line timed apart (unprofiled, CUPTI's floor, kname --json, kname --trace), the launch API
calls each line makes per iteration (runtime cuda* and driver cu* calls, from kname's trace),
its GPU launches, and the Python function calls each line makes (sys.setprofile) unprofiled and
under kname profile.

Without a GPU it says so in one line. A library missing here loses its lines (said in a note), a
variant that cannot run here (no cupti-python, no Proton) is left out, said in one line. --json
keeps the numbers measured; --table prints the table made from them again, anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, clean_env, no_gpu, quantile, round_orders, write_json

PROGRAM = Path(__file__).resolve().parent / "mixed_program.py"
VARIANTS = (
    "unprofiled",
    "unprofiled again",
    "CUPTI floor",
    "kname --json",
    "kname --trace",
    "Proton",
)
BARE, AGAIN, FLOOR, JSON, TRACE, PROTON = VARIANTS
BREAKDOWN = (BARE, FLOOR, JSON, TRACE)


class Runs:
    """Starts the program under each variant, in a scratch folder."""

    def __init__(self, scratch: Path, iterations: int, warmup: int, floor: Path | None) -> None:
        self.scratch = scratch
        self.iterations = iterations
        self.warmup = warmup
        self.floor = floor
        self.count = 0
        self.env = clean_env(
            {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        )

    def command(self, variant: str, folder: Path, extra: list[str]) -> list[str]:
        program = [
            sys.executable, str(PROGRAM), "--out", str(folder / "result.json"),
            "--iterations", str(self.iterations), "--warmup", str(self.warmup), *extra,
        ]  # fmt: skip
        kname = [sys.executable, "-m", "kname", "profile", "--json", str(folder / "profile.json")]
        if variant == FLOOR:
            return [*program, "--floor", str(self.floor)]
        if variant == PROTON:
            return [*program, "--proton", str(folder / "proton")]
        if variant == JSON:
            return [*kname, "--", *program]
        if variant == TRACE:
            return [*kname, "--trace", str(folder / "trace.json"), "--", *program]
        return program

    def run(self, variant: str, extra: list[str] = ()) -> dict:
        """One process: its result (loop_ns, ...), process_ns, and kname's files read back."""
        self.count += 1
        folder = self.scratch / f"run{self.count}"
        folder.mkdir()
        start = time.perf_counter_ns()
        done = subprocess.run(
            self.command(variant, folder, list(extra)), cwd=folder, env=self.env,
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        elapsed = time.perf_counter_ns() - start
        result_file = folder / "result.json"
        if done.returncode != 0 or not result_file.exists():
            tail = " / ".join((done.stdout + done.stderr).strip().splitlines()[-4:])
            return {"error": f"{variant} exited {done.returncode}: {tail}"}
        result = json.loads(result_file.read_text())
        result["process_ns"] = elapsed
        result["folder"] = str(folder)
        return result


def gpu_launches_per_iteration(result: dict) -> float | None:
    """GPU records of kname's profile over the iterations the program ran (its few set-up
    launches, arrays made, are left in: under 0.2% of the loop's)."""
    path = Path(result["folder"]) / "profile.json"
    if not path.exists():
        return None
    document = json.loads(path.read_text())
    return document["total_launches"] / (result["iterations"] + result["warmup"])


def measure(runs: Runs, variants: list[str], rounds: int, max_seconds: float) -> dict:
    """Per variant: [loop_ns] and [process_ns] per round, rounds interleaved; a round that would
    pass max_seconds is not started (each round runs every variant)."""
    loops: dict[str, list[float]] = {v: [] for v in variants}
    processes: dict[str, list[float]] = {v: [] for v in variants}
    notes: list[str] = []
    per_launch: list[float] = []
    calls_per_iteration: list[
        float
    ] = []  # launch API calls CUPTI reported per iteration, nested ones too
    started = time.perf_counter()
    round_seconds = 0.0
    last: dict = {}  # the results of the last whole round
    for number, order in enumerate(round_orders(variants, rounds)):
        if number and time.perf_counter() - started + round_seconds > max_seconds:
            notes.append(f"{number} rounds of {rounds}: --max-seconds {max_seconds:g} reached")
            break
        began = time.perf_counter()
        results = {variant: runs.run(variant) for variant in order}
        round_seconds = time.perf_counter() - began
        errors = [r["error"] for r in results.values() if "error" in r]
        if errors:
            notes += errors
            break
        for variant, result in results.items():
            loops[variant].append(result["loop_ns"])
            processes[variant].append(result["process_ns"])
        launches = gpu_launches_per_iteration(results[JSON]) if JSON in results else None
        if launches:
            per_launch.append(launches)
        if results.get(JSON, {}).get("launch_calls"):
            calls_per_iteration.append(results[JSON]["launch_calls"] / results[JSON]["iterations"])
        last = results
    first = next(iter(last.values()), {})
    return {
        "loops": loops,
        "processes": processes,
        "notes": notes,
        "launches_per_iteration": statistics.median(per_launch) if per_launch else None,
        "api_calls_per_iteration": statistics.median(calls_per_iteration)
        if calls_per_iteration
        else None,
        "iterations": first.get("iterations"),
        "lines": first.get("lines", []),
        "skipped": first.get("skipped", {}),
    }


def summary(measured: dict) -> list[dict]:
    """Each variant's row: loop ms (median), ratio, added µs per GPU launch (lower quartile,
    median of per-round differences to the unprofiled run), process s (median)."""
    loops, processes = measured["loops"], measured["processes"]
    launches = (measured["launches_per_iteration"] or 0) * (measured["iterations"] or 0)
    base = loops[BARE]
    rows = []
    for variant, values in loops.items():
        if not values:
            continue
        row = {
            "variant": variant,
            "rounds": len(values),
            "loop_ms": statistics.median(values) / 1e6,
            "ratio": statistics.median(values) / statistics.median(base),
            "process_s": statistics.median(processes[variant]) / 1e9,
        }
        if variant != BARE and launches:
            added = [(v - b) / launches / 1e3 for v, b in zip(values, base, strict=True)]
            row["added_us_p25"] = quantile(added, 0.25)
            row["added_us_median"] = statistics.median(added)
        rows.append(row)
    return rows


def differences(measured: dict, variant: str, base: str) -> float | None:
    """Median per-round difference of two variants, µs per GPU launch."""
    loops = measured["loops"]
    launches = (measured["launches_per_iteration"] or 0) * (measured["iterations"] or 0)
    if not (loops.get(variant) and loops.get(base) and launches):
        return None
    return statistics.median(
        (v - b) / launches / 1e3 for v, b in zip(loops[variant], loops[base], strict=True)
    )


def api_calls(measured: dict) -> str:
    """The launch API calls an iteration, where kname counted them (runtime and driver calls
    both, a driver call made inside a runtime one too)."""
    calls = measured.get("api_calls_per_iteration")
    return f" ({calls:.1f} launch API calls as CUPTI reports them)" if calls else ""


def render(measured: dict, rows: list[dict], command: str) -> str:
    if not rows:
        notes = "".join(f"\n- note: {note}" for note in measured["notes"])
        return f"## kname profile on a whole program\n\n`{command}`: no round ran.{notes}\n"
    per_iteration = measured["launches_per_iteration"]
    lines = [
        "## kname profile on a whole program",
        "",
        f"`{command}`: benchmarks/mixed_program.py, {measured['iterations']} iterations of "
        f"{len(measured['lines'])} lines ({', '.join(x['label'] for x in measured['lines'])}), "
        f"{per_iteration:.1f} GPU launches an iteration{api_calls(measured)}; whole processes, "
        "variants interleaved, "
        f"{rows[0]['rounds']} rounds. Added: per GPU launch, the per-round difference to the "
        "unprofiled run (lower quartile, median); the A/A row is the host's spread."
        if per_iteration
        else f"`{command}`: no GPU launch was counted (kname's profile missing).",
        "",
        "| variant | added per launch, lower quartile | added per launch, median | loop (median) "
        "| ratio | whole process (median) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        p25 = f"{row['added_us_p25']:+.2f} µs" if "added_us_p25" in row else "—"
        median = f"{row['added_us_median']:+.2f} µs" if "added_us_median" in row else "—"
        lines.append(
            f"| {row['variant']} | {p25} | {median} | {row['loop_ms']:.1f} ms | "
            f"{row['ratio']:.2f}x | {row['process_s']:.2f} s |"
        )
    facts = []
    for label, variant, base in (
        ("kname --json above CUPTI's floor", JSON, FLOOR),
        ("--trace over --json alone", TRACE, JSON),
        ("Proton above CUPTI's floor", PROTON, FLOOR),
    ):
        value = differences(measured, variant, base)
        if value is not None:
            facts.append(f"{label}: {value:+.2f} µs per launch")
    kname_added, proton_added = (
        differences(measured, JSON, BARE),
        differences(measured, PROTON, BARE),
    )
    if kname_added is not None and proton_added:
        facts.append(f"kname's added time is {kname_added / proton_added:.0%} of Proton's")
    lines += ["", "Medians of per-round differences: " + "; ".join(facts) + "." if facts else ""]
    lines += [f"- note: {note}" for note in measured["notes"]]
    lines += [f"- skipped: {lib}: {why}" for lib, why in measured["skipped"].items()]
    return "\n".join(line for line in lines if line is not None) + "\n"


# --- the breakdown ----------------------------------------------------------------------------


def api_calls_by_line(result: dict) -> dict[int, dict[str, float]]:
    """From kname's trace of a --lines run: per line of timed_lines() (which runs the timed
    iterations only), launch API calls per iteration, runtime (cuda*) and driver (cu*), and
    GPU records."""
    path = Path(result["folder"]) / "trace.json"
    if not path.exists():
        return {}
    events = json.loads(path.read_text())["traceEvents"]
    total = result["iterations"]
    counts: dict[int, dict[str, float]] = {}
    for event in events:
        if event.get("ph") != "X":
            continue
        site = event["args"]["site"]
        if "mixed_loop.py:" not in site:
            continue
        line = int(site.rpartition(":")[2])
        entry = counts.setdefault(line, {"runtime": 0, "driver": 0, "gpu": 0})
        if event["cat"] != "launch":
            entry["gpu"] += 1
        elif event["name"].startswith("cuda"):
            entry["runtime"] += 1
        else:
            entry["driver"] += 1
    return {line: {k: v / total for k, v in c.items()} for line, c in counts.items()}


def breakdown(runs: Runs, variants: list[str]) -> str:
    """One process per variant with each line timed apart; the Python calls per line."""
    results = {v: runs.run(v, ["--lines"]) for v in variants if v in BREAKDOWN}
    calls = {v: runs.run(v, ["--count-calls"]) for v in (BARE, JSON) if v in variants}
    errors = [r["error"] for r in [*results.values(), *calls.values()] if "error" in r]
    if errors or BARE not in results:
        return "## Breakdown\n\n" + "\n".join(f"- error: {e}" for e in errors) + "\n"
    bare = results[BARE]
    per_line = api_calls_by_line(results[TRACE]) if TRACE in results else {}  # timed_lines
    iterations = bare["iterations"]
    heads = [v for v in (FLOOR, JSON, TRACE) if v in results]
    lines = [
        "## Breakdown: where the difference goes, per line",
        "",
        "Each line timed apart in one process per variant; added: µs per iteration over the "
        "unprofiled run; calls per iteration from kname's trace (runtime cuda*, driver cu*); "
        "Python calls: function calls the line makes per iteration (sys.setprofile).",
        "",
        "| line | unprofiled | "
        + " | ".join(f"{v} added" for v in heads)
        + " | runtime calls | driver calls | GPU launches | Python calls unprofiled / kname |",
        "| --- | ---: |" + " ---: |" * len(heads) + " ---: | ---: | ---: | ---: |",
    ]
    for entry in bare["lines"]:
        label, number = entry["label"], entry["line"]
        base = bare["line_ns"][label] / iterations / 1e3
        added = [f"{results[v]['line_ns'][label] / iterations / 1e3 - base:+.2f} µs" for v in heads]
        api = per_line.get(entry["timed_line"], {})
        python = [
            f"{calls[v]['python_calls'][label]:.0f}" if v in calls and "python_calls" in calls[v]
            else "?"
            for v in (BARE, JSON)
        ]  # fmt: skip
        lines.append(
            f"| {label} (line {number}) | {base:.2f} µs | {' | '.join(added)} | "
            f"{api.get('runtime', 0):.1f} | {api.get('driver', 0):.1f} | {api.get('gpu', 0):.1f} "
            f"| {' / '.join(python)} |"
        )
    return "\n".join(lines) + "\n"


# --- what can run here ------------------------------------------------------------------------


def available(env: dict[str, str]) -> tuple[list[str], list[str], Path | None]:
    """The variants that can run here, notes on those that cannot, and the floor's library."""
    notes = []
    variants = list(VARIANTS)

    def importable(module: str) -> bool:
        probe = [sys.executable, "-c", f"import {module}"]
        return subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0

    floor = None
    if not importable("cupti"):
        notes.append("no cupti-python here: the CUPTI floor and kname's variants are left out")
        variants = [v for v in variants if v not in (FLOOR, JSON, TRACE)]
    else:
        try:
            from cupti_floor import build

            floor = build()
        except Exception as exc:
            notes.append(f"the CUPTI floor could not be built ({exc}): left out")
            variants.remove(FLOOR)
    if not importable("triton.profiler"):
        notes.append("no triton.profiler (Proton) here: its variant is left out")
        variants.remove(PROTON)
    return variants, notes, floor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options; a count or time that is not above 0 is refused in one line (exit 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=above_zero(int), default=5)
    parser.add_argument("--iterations", type=above_zero(int), default=1500)
    parser.add_argument("--warmup", type=above_zero(int), default=50)
    parser.add_argument("--max-seconds", type=above_zero(float), default=330.0)
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--json", help="write the results here (for benchmarks/run.py)")
    parser.add_argument("--table", metavar="JSON", help="print the table of a saved --json run")
    return parser.parse_args(argv)


def above_zero(kind: type) -> Any:
    def read(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:  # also refuses nan
            raise argparse.ArgumentTypeError(f"expected a number above 0, not {text!r}")
        return value

    read.__name__ = kind.__name__  # argparse names the type in its message
    return read


def saved_table(path: str) -> str:
    """The table of a run saved with --json, made again from its numbers."""
    saved = json.loads(Path(path).read_text())
    if "skipped" in saved:
        return f"profile_program: the saved run was skipped, {saved['skipped']}\n"
    return render(saved["measured"], summary(saved["measured"]), saved["command"])


def main() -> None:
    args = parse_args()
    if args.table:
        print(saved_table(args.table), end="")
        return
    missing = no_gpu()
    if missing:
        print(f"profile_program: skipped, {missing}")
        if args.json:
            write_json(args.json, {"skipped": missing})
        return
    command = " ".join(["python benchmarks/profile_program.py", *sys.argv[1:]])
    with tempfile.TemporaryDirectory(prefix="kname-program-") as scratch:
        runs = Runs(Path(scratch), args.iterations, args.warmup, None)
        variants, notes, runs.floor = available(runs.env)
        measured = measure(runs, variants, args.rounds, args.max_seconds)
        measured["notes"] = notes + measured["notes"]
        rows = summary(measured)
        text = render(measured, rows, command)
        if args.breakdown:
            text += "\n" + breakdown(runs, variants)
    print(text, flush=True)
    if args.json:
        saved = {"rows": rows, "measured": measured, "markdown": text, "command": command}
        write_json(args.json, saved)


if __name__ == "__main__":
    main()
