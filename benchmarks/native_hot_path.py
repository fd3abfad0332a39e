"""kname's two per-launch wrappers on the no-op target, interleaved: Python closure and C.

    python benchmarks/native_hot_path.py [--tool] [--rounds N] [--batch N]

Each variant stands in turn in place of a no-op launch function, called from the same line of a
loop (the same call site, so both wrappers share its Site), in one process, in a new order each
round:
  bare             the no-op function itself
  python, native   kname.launch.make_launch_wrapper on the Python hot path, and on the C one
  *_off            the same wrappers with their Switch off (a wrapper kept after disable())
  *_lib            called through one frame of library code (as Triton's `k[grid]` lambda or a
                   CuPy routine call their launch), against `bare_lib`
  miss             the first launch from a new call site (native; one new line per call)
With --tool the NVTX null tool (the tests' injection library in null mode) is attached, as under
a profiler, so the ranges are pushed and popped. Needs the extension built in the checkout:
`python setup.py build_ext --inplace`. Prints medians of the added time per launch.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import round_orders

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

LOOPS = """
from time import perf_counter_ns as _clock


def loop(n):
    t0 = _clock()
    for _ in range(n):
        target(1)
    return _clock() - t0


def lib_loop(n):
    t0 = _clock()
    for _ in range(n):
        library.call(target, 1)
    return _clock() - t0
"""
LIBRARY = """
def call(launch, arg):
    return launch(arg)
"""


def noop(*args):
    return None


def null_tool_env() -> dict[str, str]:
    """The tests' NVTX injection library, built into a temporary folder, attached in null mode."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.nvtx_capture import build_injection_library, null_env

    lib = build_injection_library(Path(tempfile.mkdtemp(prefix="kname-null-tool-")))
    env = {**os.environ, **null_env(lib)}
    return {k: v for k, v in env.items() if v is not None}


def write_module(directory: Path, name: str, source: str):
    (directory / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, directory / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def timed(loop, n: int) -> float:
    gc.disable()
    try:
        return loop(n) / n
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", action="store_true", help="attach the NVTX null tool")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    if args.tool and "NVTX_INJECTION64_PATH" not in os.environ:
        # NVTX reads the variable at the process's first NVTX call: run again with it set.
        raise SystemExit(subprocess.call([sys.executable, *sys.argv], env=null_tool_env()))
    sys.path.insert(0, str(REPO))
    import kname
    from kname import callsite, hotpath, launch, ranges

    native_path, python_path = hotpath.choose(True), hotpath.choose(False)
    if native_path.why_python:
        raise SystemExit(f"kname._native is not in use: {native_path.why_python}")
    callsite.configure()
    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-native-"))
    loops = write_module(workdir, "bench_native_loops", LOOPS)
    loops.library = write_module(workdir, "bench_native_library", LIBRARY)
    callsite.configure(library_modules=("bench_native_library",))
    spec = launch.LaunchSpec("bench", lambda _kernel: "noop")
    python_switch, native_switch = launch.Switch(), launch.Switch()
    python = launch.make_launch_wrapper(noop, spec, python_switch, python_path)
    wrapper = launch.make_launch_wrapper(noop, spec, native_switch, native_path)
    assert type(wrapper).__module__ == "kname._native" and type(python).__name__ == "function"

    def variant(function, switch_on=True, lib=False):
        def run(n):
            loops.target = function
            python_switch.on = native_switch.on = switch_on
            return timed(loops.lib_loop if lib else loops.loop, n)

        return run

    variants = {
        "bare": variant(noop),
        "python": variant(python),
        "native": variant(wrapper),
        "python_off": variant(python, switch_on=False),
        "native_off": variant(wrapper, switch_on=False),
        "bare_lib": variant(noop, lib=True),
        "python_lib": variant(python, lib=True),
        "native_lib": variant(wrapper, lib=True),
    }
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for name in names * 2:  # warm-up: sites built, caches filled
        variants[name](args.batch)
    for order in round_orders(names, args.rounds):
        for name in order:
            samples[name].append(variants[name](args.batch))

    misses = []
    native_switch.on = True
    for i in range(200):  # a new call site each time: a new line of a new code object
        code = compile("\n" * i + "target(1)", f"<miss {i}>", "exec")
        t0 = time.perf_counter_ns()
        exec(code, {"target": wrapper})
        misses.append(time.perf_counter_ns() - t0)

    print(f"Python {sys.version.split()[0]}, NVTX tool attached: {ranges.tool_attached()}, "
          f"{args.rounds} rounds x {args.batch} launches, interleaved, medians")  # fmt: skip
    bare = {"": samples["bare"], "_lib": samples["bare_lib"]}
    for name in names:
        base = bare["_lib" if name.endswith("_lib") else ""]
        added = statistics.median(v - b for v, b in zip(samples[name], base, strict=True))
        median = statistics.median(samples[name])
        print(f"  {name:12s} {median:8.1f} ns/launch   added {added:+7.1f} ns")
    miss = statistics.median(misses) / 1000
    print(f"  miss (native, first launch from a new line) {miss:.1f} µs")
    named = {name: n for name, n in kname.names().items() if "miss" not in name}
    print("  launches named:", named)


if __name__ == "__main__":
    main()
