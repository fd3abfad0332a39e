"""Shared pieces of the benchmark harness: interleaved timing and its statistics, the generated
launch loops, the launch variants, the NVTX null tool, workers and the record of the machine.

Standard library only at import time, so each worker can import it before it decides which GPU
library (if any) to import.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
TOOLS = ("none", "null")  # no NVTX tool attached; the injection library of tests/ in null mode

PACKAGES = ("numba-cuda", "numpy", "nvtx", "wrapt", "cupy-cuda12x", "cupy-cuda13x", "triton")


def use_checkout() -> None:
    """Import kname from this checkout (not an installed copy), and benchmarks' own modules."""
    for path in (str(BENCH_DIR), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)


def use_test_support() -> None:
    """Make tests/support importable as `support` (the wheel, venv and NVTX tool builders)."""
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))


def build_checkout_extensions() -> str:
    """Build kname's C extensions into this checkout, as the tests do: the benchmarks import
    kname from it, and an installed kname's extensions are in site-packages, not here. Returns
    a note on what went wrong, or ""."""
    use_test_support()
    from support import build_extensions_in_place

    problem = build_extensions_in_place(REPO)
    if not problem:
        return ""
    said = " / ".join(problem.splitlines())
    return f"kname's C extensions, built into this checkout (the kname benchmarked): {said}"


# ---------------------------------------------------------------- timing


class Variant:
    """One way of launching: `prepare()` (untimed), then `loop(n)` -> elapsed ns (timed), with
    `settle()` (a device synchronisation, say) untimed before and after the loop.

    With `warm_up`, an untimed `loop(n)` follows `prepare()`. A state change (install(),
    disable(), a class attribute or a module global set again) undoes the interpreter's
    specialisations of the code that reads them, and CPython 3.12 takes some fifty executions
    of each instruction to make them again: timed at once, the first half of a batch of a
    hundred would run slower for a reason no program that keeps kname's state has.
    """

    def __init__(
        self, name: str, loop: Callable[[int], int], prepare=None, settle=None, warm_up=False
    ):
        self.name = name
        self.loop = loop
        self.prepare = prepare
        self.settle = settle
        self.warm_up = warm_up

    def batch(self, n: int) -> float:
        """ns per call of one batch of `n` calls, garbage collection held off (as timeit does)."""
        if self.prepare is not None:
            self.prepare()
        if self.warm_up:
            self.loop(n)
        if self.settle is not None:
            self.settle()
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            elapsed = self.loop(n)
        finally:
            if gc_was_on:
                gc.enable()
        if self.settle is not None:
            self.settle()
        return elapsed / n


def round_orders(items: Sequence, rounds: int, seed: int = 0) -> Iterator[list]:
    """The items in a new order for each of `rounds` rounds.

    A fixed order, rotated or not, has each item follow the same neighbour round after round,
    whose traces (caches, frequency steps) then bias that item alone; shuffled, each follows
    every other about equally often. The orders come from `seed`: a run is repeatable.
    """
    order, shuffle = list(items), random.Random(seed).shuffle
    for _ in range(rounds):
        shuffle(order)
        yield list(order)


def interleave(variants: Sequence[Variant], rounds: int, batch: int, warmup: int = 2):
    """Run the variants in a new order each round (round_orders) for `rounds` rounds.

    Returns {variant name: [ns per call of each round]}.
    """
    for _ in range(warmup):
        for variant in variants:
            variant.batch(batch)
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    for order in round_orders(variants, rounds):
        for variant in order:
            samples[variant.name].append(variant.batch(batch))
    return samples


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(samples: dict[str, list[float]], bare: str = "bare") -> dict[str, dict]:
    """Median ns per call per variant, and the added ns against `bare`.

    `added_ns` is the median of the per-round differences (variant - bare of the same round),
    which cancels slow drifts of the machine; `ratio` is median(variant) / median(bare).
    """
    base = samples[bare]
    base_median = statistics.median(base)
    out = {}
    for name, values in samples.items():
        diffs = [v - b for v, b in zip(values, base, strict=True)]
        out[name] = {
            "median_ns": statistics.median(values),
            "added_ns": 0.0 if name == bare else statistics.median(diffs),
            "added_p25_ns": 0.0 if name == bare else quantile(diffs, 0.25),
            "added_p75_ns": 0.0 if name == bare else quantile(diffs, 0.75),
            "ratio": statistics.median(values) / base_median,
            "rounds": len(values),
        }
    return out


# ---------------------------------------------------------------- launch loops and variants

# One template for every workload: LAUNCH is replaced by the workload's launch expression
# (`target.launch(arg)`, `kernel[1, 32](arr)`, ...), so every variant runs the same line. It is
# written to a real file so that the call site is user code, as kname sees it in a program.
LOOPS_TEMPLATE = '''\
"""Generated by benchmarks/_common.py: the launch loops of one workload."""
from time import CLOCK as _clock

PUSH = POP = ATTRS = None  # a domain's bound push_range/pop_range and prebuilt attributes


def launch_loop(n):
    """bare, kname and kname_disabled: the same line, only kname's state differs."""
    t0 = _clock()
    for _ in range(n):
        LAUNCH
    return _clock() - t0


def push_pop_loop(n):
    """The yardstick: a static NVTX range, prebuilt once, around the bare launch."""
    push, pop, attrs = PUSH, POP, ATTRS
    t0 = _clock()
    for _ in range(n):
        push(attrs)
        try:
            LAUNCH
        finally:
            pop()
    return _clock() - t0
'''


def write_module(directory: Path, name: str, source: str):
    """Write `source` as `directory/name.py` and import it under `name`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# What a batch is timed with (run.py --clock, passed to the workers in BENCH_CLOCK): the wall
# clock, or the launching thread's CPU time, which leaves out the time the thread is not running
# (another process on a shared host), and also any time a launch waits asleep.
CLOCKS = {"wall": "perf_counter_ns", "thread": "thread_time_ns"}
CLOCK_VARIABLE = "BENCH_CLOCK"


def clock_name() -> str:
    name = os.environ.get(CLOCK_VARIABLE, "wall")
    if name not in CLOCKS:
        raise SystemExit(f"{CLOCK_VARIABLE}={name!r}: choose one of {', '.join(CLOCKS)}")
    return name


def make_loops(directory: Path, name: str, launch: str, names: dict):
    """The loops module of one workload, its globals (`names`) set, its NVTX range prebuilt."""
    import nvtx

    source = LOOPS_TEMPLATE.replace("LAUNCH", launch).replace("CLOCK", CLOCKS[clock_name()])
    module = write_module(directory, name, source)
    vars(module).update(names)
    domain = nvtx.get_domain("bench")
    module.PUSH, module.POP = domain.push_range, domain.pop_range
    module.ATTRS = domain.get_event_attributes(message="bench launch")
    return module


VARIANTS = (
    "bare", "kname", "kname_python", "kname_disabled", "push_pop", "bare_again",
    "uninstalled_kname_object",
)  # fmt: skip


def launch_variants(loops, targets: list[str], bare_names: dict | None = None, settle=None):
    """The four variants over one loops module, kname's state set before each batch (untimed)
    through its public API only:

    - bare: kname.uninstall()ed, the library's own launch;
    - kname: installed and enabled, the call site already cached, on the hot path kname chooses
      (the C extension where it is built);
    - kname_python: the same with KNAME_NATIVE=0, the pure-Python wrapper (read at install);
    - kname_disabled: installed, then kname.disable()d;
    - push_pop: uninstalled, a prebuilt static NVTX range around the bare launch;
    - bare_again: the bare launch once more, an A/A control: what it adds is the method's own
      noise and bias on this row, the floor under which no difference means anything;
    - uninstalled_kname_object (only with `bare_names`): uninstalled, launching the object made
      while kname was installed (a CuPy kernel of kname's subclass): what that object costs
      the library's own code, apart from kname's wrapper.

    `bare_names` are globals of `loops` for the uninstalled variants (a kernel object made
    without kname, say); the kname variants get back the values `loops` has now.
    """
    import kname

    bare_names = bare_names or {}
    kname_names = {name: vars(loops)[name] for name in bare_names}

    def uninstalled(names: dict = bare_names):
        def prepare():
            kname.uninstall()
            vars(loops).update(names)

        return prepare

    def installed(enabled: bool, native: bool = True):
        def prepare():
            # install() reads KNAME_NATIVE (its Config) and makes its wrappers on that hot path,
            # and keeps the wrappers of an install still in place: start afresh.
            kname.uninstall()
            if native:
                os.environ.pop("KNAME_NATIVE", None)
            else:
                os.environ["KNAME_NATIVE"] = "0"
            kname.install(targets=targets)
            if enabled:
                kname.enable()
            else:
                kname.disable()
            vars(loops).update(kname_names)

        return prepare

    # Each timed batch follows an untimed one of its own variant (Variant.warm_up): the state
    # is then as a program that keeps it has it, and a new install()'s cache miss is untimed.
    made = [
        ("bare", loops.launch_loop, uninstalled()),
        ("kname", loops.launch_loop, installed(True)),
        ("kname_python", loops.launch_loop, installed(True, native=False)),
        ("kname_disabled", loops.launch_loop, installed(False)),
        ("push_pop", loops.push_pop_loop, uninstalled()),
        ("bare_again", loops.launch_loop, uninstalled()),
    ]
    if bare_names:
        made.append(("uninstalled_kname_object", loops.launch_loop, uninstalled(kname_names)))
    return [Variant(name, loop, prepare, settle, warm_up=True) for name, loop, prepare in made]


def launch_record(loops_samples: dict, rounds: int, batch: int, site_file: str = "") -> dict:
    """What a launch worker reports: the summary, and proof that kname named the launches (the
    names of sites in `site_file`, where given)."""
    import kname
    from kname import hotpath, ranges

    why_not = hotpath.choose(True).why_python  # the "kname" variant's: no KNAME_NATIVE
    return {
        "hot_path": f"pure Python ({why_not})" if why_not else "C extension",
        "rounds": rounds,
        "batch": batch,
        "load_average": load_average(),
        "tool_attached": ranges.tool_attached(),
        "variants": summarize(loops_samples),
        "site_names": {
            name: count
            for name, count in kname.names().items()
            if count and (not site_file or f"{site_file}:" in name)
        },
    }


# ---------------------------------------------------------------- the NVTX null tool


def build_null_tool(out_dir: Path) -> Path:
    """The tests' NVTX injection library, built as the tests build it; used in its null mode.

    Raises RuntimeError (the tests' InjectionUnavailable) without a C compiler.
    """
    use_test_support()
    from support.nvtx_capture import build_injection_library

    return build_injection_library(out_dir)


def tool_env(tool: str, lib: Path | None) -> dict[str, str | None]:
    """Environment for a worker: the null tool attached, or no tool at all (None: removed)."""
    if tool == "null":
        use_test_support()
        from support.nvtx_capture import null_env

        return null_env(lib)
    return {"NVTX_INJECTION64_PATH": None, "KNAME_NVTX_LOG": None}


def clean_env(extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """os.environ without kname's and NVTX's variables, plus `extra` (None removes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_worker(script: str, args: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run benchmarks/`script` in a fresh interpreter; return the JSON it wrote."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"kname-bench-{uuid.uuid4().hex}.json"
    cmd = [sys.executable, str(BENCH_DIR / script), *args, "--json", str(out)]
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0 or not out.exists():
            tail = (done.stdout + done.stderr)[-3000:]
            return {"error": f"{script} {' '.join(args)} exited {done.returncode}:\n{tail}"}
        result = json.loads(out.read_text())
        if done.stderr.strip():
            result.setdefault("stderr", done.stderr.strip()[-2000:])
        return result
    except subprocess.TimeoutExpired:
        return {"error": f"{script} {' '.join(args)} ran past {timeout:.0f} s"}
    finally:
        out.unlink(missing_ok=True)


def no_gpu() -> str | None:
    """Why no GPU benchmark can run here, or None: asks the CUDA driver for its devices."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "the CUDA driver found no usable device"
    return None if count.value > 0 else "no CUDA device"


def write_json(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------- the record


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def versions() -> dict[str, str]:
    # kname's version from the checkout's file, without importing kname into this process.
    spec = importlib.util.spec_from_file_location("_kname_version", REPO / "kname" / "_version.py")
    version = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(version)
    found = {"kname": f"{version.__version__} (checkout)"}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def git_state() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--", "kname")
        return git("rev-parse", "--short", "HEAD") + (" (kname/ modified)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine() -> dict:
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "git": git_state(),
        "packages": versions(),
    }
