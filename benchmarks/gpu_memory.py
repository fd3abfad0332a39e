"""What `kname profile --memory` costs on an allocation-heavy program: a torch training step.

    python3 benchmarks/gpu_memory.py [--rounds 3] [--steps 300] [--budget 60] [--json FILE]
    python3 benchmarks/gpu_memory.py --kernels 200000 [--rounds 3] ...

Runs tests/gpu/memory_cost.py (two conv and two linear layers, Adam, a batch small enough that
the step is bound by the CPU) once per variant per round, the variants in a new order each round:

    profile     kname profile
    memory      kname profile --memory (torch's blocks through its allocator's tracker:
                kname/profiling/torch_tracker.py)
    memory-hook kname profile --memory with KNAME_PROFILE_TORCH_TRACKER=0: torch's blocks
                through its GPU trace (kname's C hook)
    no-torch    kname profile --memory with kname's torch hook left out (the driver's side:
                its memory API callbacks and records, and who reads CUPTI's buffers)
    memory-python  kname profile --memory with the torch hook's Python path (the fallback
                where kname._native_cupti is not built; `memory` takes the C one there)
    base-memory kname profile --memory of another checkout (--base DIR, its C built in place):
                before and after a change, in the same rounds

Prints, per variant, the median ms per step and its ratio to `profile` (the median of the
per-round ratios), the torch blocks handed out per step, and what --memory adds per block
((memory - profile) per step / blocks per step); and the ns per torch.empty(4096) and its free.
With --kernels N the program launches N in-place adds instead (no allocation; ms per 1000
launches), under profile and memory (and base-memory): what --memory adds to the reading of
kernel records.
Stops starting runs once `budget` seconds have gone. Without a GPU it says so and exits.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import no_gpu, round_orders, write_json

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "tests" / "gpu" / "memory_cost.py"
VARIANTS = {
    "profile": ([], {}),
    "memory": (["--memory"], {}),
    "memory-hook": (["--memory"], {"KNAME_PROFILE_TORCH_TRACKER": "0"}),
    "no-torch": (["--memory"], {"MEMORY_COST_NO_TORCH_HOOK": "1"}),
    "memory-python": (["--memory"], {"MEMORY_COST_TORCH_HOOK": "python"}),
    "base-memory": (["--memory"], {}),  # --base's kname (another checkout, built in place)
}
SAID: set[str] = set()
NUMBER = re.compile(r"^(STEP|ALLOCS|SEGMENTS|ALLOC) ([0-9.]+)", re.MULTILINE)


def run_variant(
    name: str, program: list[str], timeout: float, base: Path | None = None
) -> dict[str, float] | None:
    """One run of the program under `name`'s kname profile (kname from this checkout, or from
    `base` for base-*): its numbers, or None (said)."""
    flags, extra = VARIANTS[name]
    tree = base if name.startswith("base-") and base is not None else REPO
    command = [sys.executable, "-m", "kname", "profile", *flags, "--top", "3", "--"]
    command += [sys.executable, str(PROGRAM), *program]
    env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(tree)}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        print(f"{name}: timed out after {timeout:.0f} s")
        return None
    for line in done.stderr.splitlines():  # kname's own lines, each said once here
        if line.startswith("kname:") and line not in SAID and "collecting through" not in line:
            SAID.add(line)
            print(f"{name}: {line[:300]}")
    numbers = {key: float(value) for key, value in NUMBER.findall(done.stdout)}
    numbers["WALL"] = time.monotonic() - started  # the whole run: the final flush included
    if "STEP" not in numbers or "cannot import kname" in done.stderr:
        print(f"{name}: rc {done.returncode}: {(done.stdout + done.stderr)[-600:]}")
        return None
    return numbers


def summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per variant: medians, and the median per-round ratio of its step to profile's."""
    out = {}
    base = runs.get("profile", [])
    for name, numbers in runs.items():
        if not numbers:
            continue
        step = statistics.median(n["STEP"] for n in numbers)
        allocs = statistics.median(n["ALLOCS"] for n in numbers)
        row = {"step_ms": step, "allocs_per_step": allocs, "runs": len(numbers)}
        row["wall_s"] = statistics.median(n["WALL"] for n in numbers)
        if all("ALLOC" in n for n in numbers):
            row["alloc_ns"] = statistics.median(n["ALLOC"] for n in numbers)
        base_of = {b["round"]: b for b in base}
        pairs = [(n, base_of[n["round"]]) for n in numbers if n["round"] in base_of]
        if name != "profile" and pairs:
            row["ratio"] = statistics.median(n["STEP"] / b["STEP"] for n, b in pairs)
            added_ms = statistics.median(n["STEP"] - b["STEP"] for n, b in pairs)
            row["added_us_per_block"] = 1000 * added_ms / max(allocs, 1)
        out[name] = row
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--kernels", type=int, help="the kernel-heavy loop, this many launches")
    parser.add_argument("--base", type=Path, help="another checkout: adds base-memory")
    parser.add_argument("--variants", help="a comma list of the variants to run (all: default)")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds for all the runs")
    parser.add_argument("--json", help="write the numbers here too")
    args = parser.parse_args()
    reason = no_gpu()
    if reason:
        print(f"gpu_memory: skipped: {reason}")
        return 0
    deadline = time.monotonic() + args.budget
    names = ["profile", "memory"]
    if not args.kernels:
        names += ["memory-hook", "no-torch", "memory-python"]
    if args.base is not None:
        names.append("base-memory")
    if args.variants:
        names = [name for name in names if name in args.variants.split(",")]
    program = ["kernels", str(args.kernels)] if args.kernels else [str(args.steps)]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_number, order in enumerate(round_orders(names, args.rounds)):
        for name in order:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            numbers = run_variant(name, program, left + 10, args.base)
            if numbers:
                runs[name].append({**numbers, "round": round_number})
                print(f"{name}: {numbers}")
    rows = summary(runs)
    for name, row in rows.items():
        print(
            f"{name:13} {row['step_ms']:.3f} ms/step  x{row.get('ratio', 1.0):.3f}  "
            f"{row['allocs_per_step']:.0f} blocks/step  "
            f"+{row.get('added_us_per_block', 0.0):.2f} us/block  "
            f"torch.empty+free {row.get('alloc_ns', 0):.0f} ns  run {row['wall_s']:.2f} s  "
            f"({row['runs']} runs)"
        )
    if args.json:
        write_json(args.json, {"variants": rows, "runs": runs, "program": program})
    return 0


if __name__ == "__main__":
    sys.exit(main())
