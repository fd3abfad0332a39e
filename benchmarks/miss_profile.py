"""Where a miss's time goes: the Python functions a first launch from a new line calls (in a
file seen before, and in a new file), with cProfile's own time per function over many misses.

    python benchmarks/miss_profile.py [--pairs 2000] [--native 0|1] [--repo CHECKOUT]

The functions are benchmarks/miss_path.py's (the no-op target); the profile adds its own cost
per call, so read the shares, not the totals.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))


def calls_of(call) -> list[str]:
    """The Python functions `call` runs, in order."""
    seen: list[str] = []

    def note(frame, event, arg):
        if event == "call":
            code = frame.f_code
            seen.append(f"{Path(code.co_filename).name}:{code.co_name}")

    sys.setprofile(note)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--native", choices=("0", "1"))
    parser.add_argument("--repo", help="import kname from this checkout (default: this one)")
    args = parser.parse_args()
    if args.native is not None:
        os.environ["KNAME_NATIVE"] = args.native
    sys.path.insert(0, str(Path(args.repo).resolve() if args.repo else BENCH_DIR.parent))
    import bench_noop_target as target
    import miss_path

    import kname
    from kname import hotpath

    kname.install(targets=miss_path.TARGETS)
    folder = Path(tempfile.mkdtemp(prefix="kname-miss-profile-"))
    path = "Python" if hotpath.current().why_python else "C"
    seen = miss_path.seen_file_sites(folder, args.pairs + 1, target)
    new = miss_path.new_file_sites(folder, args.pairs + 1, target)
    for case, functions in (("seen_file", seen), ("new_file", new)):
        calls = calls_of(functions[0])
        print(f"== {case} ({path} path): {len(calls)} Python calls in one miss")
        print("   " + " ".join(calls))
        profile = cProfile.Profile()
        profile.enable()
        for function in functions[1:]:
            function()
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(18)
        lines = [line for line in text.getvalue().splitlines() if line.strip()]
        print("\n".join(lines[2:24]))


if __name__ == "__main__":
    main()
