"""GPU program for KNAME_MODE=rename: numba-cuda kernels compiled under their call sites' names.

Run on a machine with a CUDA GPU, from the repository root:

    KNAME=1 KNAME_MODE=rename ncu --print-summary per-kernel python tests/gpu/rename_demo.py
    KNAME=1 KNAME_MODE=rename python tests/gpu/rename_demo.py     # the timings, no profiler
    python tests/gpu/rename_demo.py --cache-check                 # the disk cache, two runs

(without the kname wheel installed, `PYTHONPATH=.` instead of `KNAME=1`: the program then
installs kname itself, in rename mode). Under ncu, the kernel names column should show each
`SITE` line's entry name (such as `axpy__tests_gpu_rename_demo_py_L97`), and the reference
launches, made with kname paused, the kernels' own names. Printed: one `SITE <marker> <line>
<entry name> <launches>` per marked line, `CHECK <what>: OK|FAIL ...` lines, `COST` lines (the
first launch from a new call site, which compiles; meaningful without a profiler only) and exit
status 1 if any check failed.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# numba-cuda 0.30 calls numpy.row_stack, which numpy 2.5 removed: alias it here, in this program
# only (never inside kname), before numba is imported.
import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

import kname

if not kname.is_installed():
    os.environ.setdefault("KNAME_MODE", "rename")
    kname.install()

from numba import cuda

from kname import callsite
from kname.lifecycle import current_config

N = 1 << 20
BLOCK = 256
GRID = N // BLOCK
SOURCE = Path(__file__).read_text()
failures: list[str] = []


def check(what: str, ok: bool, detail: str = "") -> None:
    print(f"CHECK {what}: {'OK' if ok else 'FAIL'} {detail}".rstrip(), flush=True)
    if not ok:
        failures.append(what)


@cuda.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit(fastmath=True, lineinfo=True)
def smooth(out, x):
    i = cuda.grid(1)
    if 0 < i < out.size - 1:
        out[i] = (x[i - 1] + 2.0 * x[i] + x[i + 1]) / 4.0 + math.sin(x[i]) / x[i]


@cuda.jit(debug=True, opt=False)
def checked(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * 3.0


@cuda.jit(cache=True)
def cached_scale(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] * 0.5 + 1.0


def inputs():
    rng = np.random.default_rng(7)
    x = cuda.to_device(rng.standard_normal(N).astype(np.float32) + 3.0)
    y = cuda.to_device(rng.standard_normal(N).astype(np.float32))
    return x, y


def launches(x, y) -> dict[str, np.ndarray]:
    """One launch from each marked line; the results, by marker."""
    results = {name: cuda.device_array(N, np.float32) for name in MARKERS}
    axpy[GRID, BLOCK](results["axpy-a"], np.float32(2.0), x, y)  # site: axpy-a
    axpy[GRID, BLOCK](results["axpy-b"], np.float32(2.0), x, y)  # site: axpy-b
    smooth[GRID, BLOCK](results["smooth"], x)  # site: smooth
    checked[GRID, BLOCK](results["checked"], x)  # site: checked
    cached_scale[GRID, BLOCK](results["cached"], x)  # site: cached
    axpy.forall(N)(results["forall"], np.float32(2.0), x, y)  # site: forall
    cuda.synchronize()
    return {name: array.copy_to_host() for name, array in results.items()}


MARKERS = ("axpy-a", "axpy-b", "smooth", "checked", "cached", "forall")


def line(marker: str) -> int:
    found = [n for n, text in enumerate(SOURCE.splitlines(), 1) if f"# site: {marker}" in text]
    return found[-1]


def site_at(marker: str):
    sites = [s for s in list(callsite.sites.values()) if s.name.endswith(f":{line(marker)}")]
    return sites[0] if len(sites) == 1 else None


def check_sites() -> None:
    for marker in MARKERS:
        site = site_at(marker)
        if site is None or site.launch is None:
            check(f"{marker} renamed", False, "no site, or a site without its renamed kernel")
            continue
        copy = site.launch.dispatcher
        entries = sorted({k.entry_name for k in copy.overloads.values()})
        loaded = sorted({k._codelibrary.get_cufunc().name for k in copy.overloads.values()})
        print(f"SITE {marker} {line(marker)} {' '.join(entries)} {site.launches()}", flush=True)
        check(f"{marker} entry name", entries == [site.identifier], f"{entries}")
        check(f"{marker} loaded function", loaded == [site.identifier], f"{loaded}")


def check_results(x, y) -> None:
    renamed = launches(x, y)
    with kname.paused():  # the kernels' own compiles, under their own names
        plain = launches(x, y)
    for marker in MARKERS:
        same = renamed[marker].tobytes() == plain[marker].tobytes()
        check(f"{marker} bit-identical to the plain kernel", same)


def first_launch_ms(run) -> float:
    cuda.synchronize()
    start = time.perf_counter()
    run()
    cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def measure_compile_cost(x, y) -> None:
    """The first launch from a new call site (it compiles) against a launch that does not."""
    fresh = cuda.jit(axpy.py_func)  # nothing compiled yet
    out = cuda.device_array(N, np.float32)
    a = np.float32(2.0)
    with kname.paused():
        plain_first = first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y))
        plain_steady = statistics.median(
            first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)) for _ in range(20)
        )
    new_sites = [
        first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)),  # cost-1
        first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)),  # cost-2
        first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)),  # cost-3
        first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)),  # cost-4
        first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)),  # cost-5
    ]
    renamed_steady = statistics.median(
        first_launch_ms(lambda: fresh[GRID, BLOCK](out, a, x, y)) for _ in range(20)
    )
    first = statistics.median(new_sites)
    each = ", ".join(f"{t:.1f}" for t in new_sites)
    print(f"COST plain: first launch (compiles) {plain_first:.1f} ms, later {plain_steady:.3f} ms")
    print(f"COST renamed: first launch from 5 new sites {each} ms, later {renamed_steady:.3f} ms")
    print(f"COST per call site: about {first - renamed_steady:.0f} ms", flush=True)


def cache_run() -> None:
    """One run for --cache-check: the cached kernel from its site, then with kname paused."""
    x, _ = inputs()
    out = cuda.device_array(N, np.float32)
    cached_scale[GRID, BLOCK](out, x)  # site: cache-run
    with kname.paused():
        cached_scale[GRID, BLOCK](out, x)
    copy = site_at("cache-run").launch.dispatcher
    renamed = next(iter(copy.overloads.values())).entry_name
    plain = next(iter(cached_scale.overloads.values())).entry_name
    hits = sum(copy.stats.cache_hits.values()), sum(cached_scale.stats.cache_hits.values())
    print(f"CACHE {renamed} {plain} {hits[0]} {hits[1]}", flush=True)


def cache_check() -> int:
    """Two fresh processes with one cache folder: the second loads both kernels, by name."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "NUMBA_CACHE_DIR": folder, "KNAME_MODE": "rename"}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
        )
        runs = []
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, __file__, "--cache-run"], env=env, capture_output=True,
                text=True, check=False,
            )  # fmt: skip
            print(done.stdout, done.stderr, sep="", end="")
            fields = [ln.split() for ln in done.stdout.splitlines() if ln.startswith("CACHE ")]
            runs.append(fields[-1][1:] if done.returncode == 0 and fields else None)
    first, second = runs
    check("cache: both runs finished", None not in runs)
    if None in runs:
        return 1
    check("cache: renamed entry", first[0].startswith("cached_scale__"), first[0])
    check("cache: plain entry", first[1].startswith("_Z"), first[1])
    check("cache: first run compiles both", first[2:] == ["0", "0"], str(first[2:]))
    check("cache: second run loads both", second[2:] == ["1", "1"], str(second[2:]))
    check("cache: names kept", second[:2] == first[:2], str(second[:2]))
    return 1 if failures else 0


def main() -> int:
    config = current_config()
    if config is None or config.mode != "rename":
        print("FAIL: run with KNAME_MODE=rename (or without the wheel, PYTHONPATH=.)")
        return 1
    print(f"kname rename demo on {cuda.get_current_device().name}, N={N}", flush=True)
    x, y = inputs()
    check_results(x, y)
    check_sites()
    measure_compile_cost(x, y)
    for name, launches_seen in sorted(kname.names().items()):
        print(f"NAME {launches_seen:3d}  {name}")
    print("rename demo:", "FAILED " + ", ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    if "--cache-check" in sys.argv:
        sys.exit(cache_check())
    if "--cache-run" in sys.argv:
        sys.exit(cache_run())
    sys.exit(main())
