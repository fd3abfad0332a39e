"""The first launch from a new line (the cache miss), in its two cases: a new line in a file
kname has seen, and a line of a file it has not.

    python benchmarks/miss_path.py [--pairs 1000] [--json OUT] [--repo CHECKOUT] [--native 0|1]

The launch is the no-op target (bench_noop_target.py), so what is timed is kname's miss alone.
Each case compiles 2 * `pairs` functions that launch once each, imported before timing: in the
seen-file case all in one module (whose first launch, untimed, makes the file seen), in the
new-file case each in a module of its own. They launch alternately with kname.disable()d (the
bare first call) and through kname (the miss), in a new order each pair; both halves pay a new
function's first-call costs, so the difference of the medians is kname's miss. The second
launch of each named function is the cached launch, for scale. `--repo`: import kname from
another checkout (a branch point's, to compare in one run), `--native 0`: the pure-Python path.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from _common import quantile, write_module  # noqa: E402

TARGETS = ["bench_noop_target:launch"]

SITE = """
def site_{i:05d}():
    target.launch(1)
"""


def seen_file_sites(folder: Path, count: int, target) -> list:
    """`count` launching functions in one module, the first already launched once (untimed)."""
    source = "".join(SITE.format(i=i) for i in range(count + 1))
    module = write_module(folder, "miss_seen_file", source)
    module.target = target
    functions = [getattr(module, f"site_{i:05d}") for i in range(count + 1)]
    functions[0]()  # the file is now one kname has seen
    return functions[1:]


def new_file_sites(folder: Path, count: int, target) -> list:
    """`count` launching functions, each in a module (and file) of its own."""
    functions = []
    for i in range(count):
        module = write_module(folder, f"miss_new_{i:05d}", SITE.format(i=0))
        module.target = target
        functions.append(module.site_00000)
    return functions


def time_misses(functions: list, seed: int) -> dict:
    """Pairs of functions: one launched with kname disabled, one through kname (then again)."""
    import kname

    clock = time.perf_counter_ns
    bare, first, second = [], [], []
    shuffle = random.Random(seed).random
    gc.disable()
    try:
        for i in range(0, len(functions) - 1, 2):
            plain, named = functions[i], functions[i + 1]
            for which in (0, 1) if shuffle() < 0.5 else (1, 0):
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
    return {
        "pairs": len(first),
        "bare_first_call_ns": statistics.median(bare),
        "kname_first_call_ns": statistics.median(first),
        "kname_first_call_p90_ns": quantile(first, 0.9),
        "kname_second_call_ns": statistics.median(second),
        "added_ns": statistics.median(first) - statistics.median(bare),
    }


def cases(pairs: int, folder: Path, target) -> dict:
    """Both cases, kname installed on the no-op target `target`: {case: its timings}."""
    from kname import callsite

    seen = seen_file_sites(folder, 2 * pairs, target)
    new = new_file_sites(folder, 2 * pairs, target)
    before = len(callsite.sites)
    result = {"seen_file": time_misses(seen, 1), "new_file": time_misses(new, 2)}
    result["new_sites"] = len(callsite.sites) - before
    return result


def measure(pairs: int, folder: Path) -> dict:
    """cases(), kname installed here on the no-op target."""
    import bench_noop_target as target

    import kname
    from kname import hotpath

    kname.install(targets=TARGETS)
    result = cases(pairs, folder, target)
    return {"hot_path": "Python" if hotpath.current().why_python else "C", **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--json")
    parser.add_argument("--repo", help="import kname from this checkout (default: this one)")
    parser.add_argument("--native", choices=("0", "1"), help="KNAME_NATIVE for the run")
    args = parser.parse_args()
    if args.native is not None:
        os.environ["KNAME_NATIVE"] = args.native
    repo = Path(args.repo).resolve() if args.repo else BENCH_DIR.parent
    sys.path.insert(0, str(repo))
    result = measure(args.pairs, Path(tempfile.mkdtemp(prefix="kname-miss-")))
    result["repo"] = str(repo)
    result["load_average"] = list(os.getloadavg())
    for case in ("seen_file", "new_file"):
        row = result[case]
        print(
            f"miss {case:9} ({result['hot_path']} path, {row['pairs']} pairs): "
            f"+{row['added_ns'] / 1000:.1f} µs (kname {row['kname_first_call_ns'] / 1000:.1f}, "
            f"bare {row['bare_first_call_ns'] / 1000:.1f}, cached "
            f"{row['kname_second_call_ns'] / 1000:.2f})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
