"""Worker: kname's own per-launch cost on the CPU, for one NVTX tool setting.

Run by run.py in a fresh interpreter per setting (NVTX reads NVTX_INJECTION64_PATH once, at the
process's first NVTX call). The launch is a function that returns at once, configured as a
kname target (bench_noop_target.py), so what is measured is kname alone. Twice: launched from a
loop (the loop's frame is the call site), and from a function the loop calls once per launch, as
a training step is (a new frame at every launch). Also measured: the first launch from many new
call sites (the cache miss), a new line in a file seen before and a line of a new file
(miss_path.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import miss_path
from _common import (
    interleave,
    launch_record,
    launch_variants,
    make_loops,
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
    result["miss"] = miss_path.cases(args.miss_sites, workdir, target)
    write_json(args.json, result)


STEP_SOURCE = """
def step(arg):
    target.launch(arg)
"""

if __name__ == "__main__":
    main()
