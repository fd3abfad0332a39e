"""Start-up costs: kname's wheel installed into a fresh venv, against the same venv without it.

- `python -c pass`: not installed (twice: the second is an A/A control, what it adds is the
  method's own noise) / installed and switched off / switched on (KNAME=1, no GPU library
  imported; on the C hot path, and with KNAME_NATIVE=0 on the pure-Python one), many
  interleaved runs, median and lower quartile per run, by the wall clock and the child's CPU
  time; and which heavy modules a switched-on start-up imports (the budget: neither numpy nor
  nvtx on the C hot path).
- The .pth gate alone, in this process (switch off): `site.addpackage` on kname.pth (open, read,
  exec of its line, as site.py does at start-up), `exec(line)` of the line as text, and of the
  line precompiled. Isolates the gate from the interpreter's start-up noise (milliseconds).
- kname's import finder (its post-import-hook finder, on sys.meta_path once kname is on):
  1000 tiny unrelated modules imported in a subprocess, timed inside it, not installed /
  installed and off / switched on.

Uses the tests' build_wheel and make_venv (tests/support): the venvs see this interpreter's
packages through a .pth; kname comes from the wheel only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import resource
import shlex
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    Variant,
    clean_env,
    interleave,
    quantile,
    round_orders,
    summarize,
    use_test_support,
)

IMPORT_SCRIPT = """\
import sys, time
sys.path.insert(0, {directory!r})
names = [f"kname_bench_mod_{{i:04d}}" for i in range({count})]
t0 = time.perf_counter_ns()
for name in names:
    __import__(name)
print(time.perf_counter_ns() - t0)
"""

# The finder alone: how long kname's finder (first on sys.meta_path once kname is on) takes to
# decline a module it has no hook for, as every unrelated import asks it.
FIND_SPEC_SCRIPT = """\
import sys, time
finders = [f for f in sys.meta_path if type(f).__module__.startswith("kname")]
if not finders:
    raise SystemExit("no kname finder on sys.meta_path")
finder, n = finders[0], 100_000
find_spec = finder.find_spec
t0 = time.perf_counter_ns()
for _ in range(n):
    find_spec("kname_bench_unrelated_module", None)
print((time.perf_counter_ns() - t0) / n, sys.meta_path.index(finder), type(finder).__qualname__)
"""


def missing_for_the_wheel() -> str:
    """What this Python lacks to build kname's wheel as the tests do (pip wheel without build
    isolation, so pyproject.toml's build requirements must be installed), in one line; "" when
    nothing. setuptools before 70.1 builds wheels only with the wheel package."""
    if importlib.util.find_spec("setuptools") is None:
        needed = "setuptools>=64 wheel"
    else:
        version = importlib.metadata.version("setuptools")
        major, minor = (int(part) for part in re.match(r"(\d+)\.(\d+)", version).groups())
        if major < 64:
            needed = "setuptools>=64"
        elif (major, minor) < (70, 1) and importlib.util.find_spec("wheel") is None:
            needed = "wheel"
        else:
            return ""
    return (
        f"building kname's wheel (pip wheel --no-build-isolation, as the tests do) needs "
        f"{needed} in this Python: {sys.executable} -m pip install {shlex.join(needed.split())}"
    )


def run(quick: bool, log=print, rounds: int | None = None) -> dict:
    """The suite; `rounds` of `python -c pass` (default 20 quick, 60 full)."""
    use_test_support()
    from support import build_wheel, make_venv

    work = Path(tempfile.mkdtemp(prefix="kname-bench-startup-"))
    started = time.perf_counter()
    wheel = build_wheel(work / "wheel")
    installed = make_venv(work / "with-kname")
    installed.install(str(wheel))
    plain = make_venv(work / "without-kname")
    log(f"  wheel and venvs ready ({time.perf_counter() - started:.1f} s)")

    result = {"wheel": wheel.name}
    result["imports_when_off"] = _probe(installed.python, work)
    runs = rounds or (20 if quick else 60)
    result["python_c_pass"] = _python_c_pass(plain.python, installed.python, work, runs)
    log("  python -c pass done")
    result["gate"] = _gate(installed.site_packages / "kname.pth", quick)
    result["finder"] = _finder(plain.python, installed.python, work, quick)
    log("  1000 imports done")
    return result


def _env(extra: dict | None = None) -> dict[str, str]:
    env = clean_env(extra)
    env.pop("PYTHONPATH", None)
    return env


# Modules whose import a start-up must be checked for: kname itself and, switched on, what would
# be heavy (numpy and the nvtx package: about 110 ms; wrapt's package imports asyncio).
PROBED = ("kname", "wrapt", "nvtx", "numpy", "asyncio")
PROBE_SCRIPT = (
    f"import sys; print(*[m in sys.modules for m in {PROBED!r}]); "
    "h = sys.modules.get('kname.hotpath'); "
    "print(h is not None and bool(h.current().extension_file))"
)


def _probe(python: Path, cwd: Path) -> dict:
    """What a start-up imported, switched off (it must be nothing) and on (on either hot path),
    and whether the C hot path was in effect."""

    def probe(extra: dict | None) -> dict:
        out = subprocess.run(
            [str(python), "-c", PROBE_SCRIPT],
            env=_env(extra),
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        seen = {name: answer == "True" for name, answer in zip(PROBED, out, strict=False)}
        return {**seen, "c_hot_path": out[len(PROBED) :] == ["True"]}

    return {
        "off": probe(None),
        "on": probe({"KNAME": "1"}),
        "on_python_path": probe({"KNAME": "1", "KNAME_NATIVE": "0"}),
    }


def _timed_run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[int, int]:
    """(wall ns, CPU ns) of one run of `cmd`: CPU time is user + system time of the child,
    which leaves out the time other processes had the CPU (most of a busy host's spread)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter_ns()
    subprocess.run(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    wall = time.perf_counter_ns() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, round(cpu * 1e9)


# The start-ups timed, each a (python, environment) case; "not installed, again" is the A/A
# control.
BARE, AGAIN, OFF = "not installed", "not installed, again", "installed, switched off"
ON, PYTHON_PATH = "installed, KNAME=1", "installed, KNAME=1 KNAME_NATIVE=0"


def _python_c_pass(plain: Path, installed: Path, cwd: Path, runs: int) -> dict:
    command = ["-c", "pass"]
    cases = {
        BARE: ([str(plain), *command], _env()),
        AGAIN: ([str(plain), *command], _env()),
        OFF: ([str(installed), *command], _env()),
        ON: ([str(installed), *command], _env({"KNAME": "1"})),
        PYTHON_PATH: ([str(installed), *command], _env({"KNAME": "1", "KNAME_NATIVE": "0"})),
    }
    for cmd, env in cases.values():  # untimed: files in the page cache, bytecode written
        for _ in range(2):
            _timed_run(cmd, env, cwd)
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for names in round_orders(cases, runs):
        for name in names:
            elapsed, used = _timed_run(*cases[name], cwd)
            wall[name].append(elapsed)
            cpu[name].append(used)
    over_bare = {"wall": summarize(wall, bare=BARE), "cpu": summarize(cpu, bare=BARE)}
    for clock, samples in (("wall", wall), ("cpu", cpu)):
        for name, values in samples.items():
            over_bare[clock][name]["p25_ns"] = quantile(values, 0.25)
    return {
        "runs": runs,
        "variants": over_bare["wall"],
        "cpu_variants": over_bare["cpu"],
        # The budget's figures: switched on against bare python (not installed), the median of
        # per-round differences, by the wall clock and by the child's CPU time; the A/A row
        # beside them.
        "on_over_bare_ns": over_bare["wall"][ON]["added_ns"],
        "python_path_over_bare_ns": over_bare["wall"][PYTHON_PATH]["added_ns"],
        "cpu_on_over_bare_ns": over_bare["cpu"][ON]["added_ns"],
        "cpu_python_path_over_bare_ns": over_bare["cpu"][PYTHON_PATH]["added_ns"],
        "a_a_ns": over_bare["wall"][AGAIN]["added_ns"],
        "cpu_a_a_ns": over_bare["cpu"][AGAIN]["added_ns"],
    }


def _gate(pth: Path, quick: bool) -> dict:
    """The gate line, switched off, timed in this process."""
    line = pth.read_text()
    code = compile(line, str(pth), "exec")
    sitedir, name = str(pth.parent), pth.name
    # The floor for any .pth import line: one short statement, same directory handling.
    floor_dir = Path(tempfile.mkdtemp(prefix="kname-bench-pth-"))
    (floor_dir / "floor.pth").write_text("import os\n")
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k == "KNAME"}
    xoption = sys._xoptions.pop("kname", None)
    already = "kname._startup" in sys.modules

    def addpackage(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            site.addpackage(sitedir, name, set())
        return time.perf_counter_ns() - t0

    def addpackage_floor(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            site.addpackage(str(floor_dir), "floor.pth", set())
        return time.perf_counter_ns() - t0

    def exec_text(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            exec(line, {})
        return time.perf_counter_ns() - t0

    def exec_code(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            exec(code, {})
        return time.perf_counter_ns() - t0

    def nothing(n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            pass
        return time.perf_counter_ns() - t0

    try:
        variants = [
            Variant("loop only", nothing),
            Variant("site.addpackage(kname.pth)", addpackage),
            Variant("reference: site.addpackage of a one-line `import os` .pth", addpackage_floor),
            Variant("exec(line) as text", exec_text),
            Variant("exec(line) precompiled", exec_code),
        ]
        samples = interleave(variants, 20 if quick else 60, 100)
        imported = "kname._startup" in sys.modules and not already
    finally:
        os.environ.update(saved)
        if xoption is not None:
            sys._xoptions["kname"] = xoption
    return {
        "line": line.strip(),
        "imported_kname": imported,
        "variants": summarize(samples, bare="loop only"),
    }


def _finder(plain: Path, installed: Path, work: Path, quick: bool, count: int = 1000) -> dict:
    directory = work / "modules"
    directory.mkdir()
    for i in range(count):
        (directory / f"kname_bench_mod_{i:04d}.py").write_text(f"VALUE = {i}\n")
    script = IMPORT_SCRIPT.format(directory=str(directory), count=count)
    cases = {
        "not installed": (plain, _env()),
        "installed, switched off": (installed, _env()),
        "installed, KNAME=1": (installed, _env({"KNAME": "1"})),
    }
    # Once each first, so every case imports from the same, already written, __pycache__.
    for python, env in cases.values():
        subprocess.run(
            [str(python), "-c", script], env=env, cwd=work, capture_output=True, check=True
        )
    samples: dict[str, list[float]] = {name: [] for name in cases}
    runs = 8 if quick else 20
    for names in round_orders(cases, runs):
        for name in names:
            python, env = cases[name]
            out = subprocess.run(
                [str(python), "-c", script],
                env=env,
                cwd=work,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            samples[name].append(int(out.strip()) / count)
    summary = summarize(samples, bare="not installed")
    find_spec, position, finder = [], None, None
    for _ in range(3 if quick else 7):
        out = subprocess.run(
            [str(installed), "-c", FIND_SPEC_SCRIPT],
            env=_env({"KNAME": "1"}),
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        find_spec.append(float(out[0]))
        position, finder = int(out[1]), out[2]
    return {
        "find_spec_ns": statistics.median(find_spec),
        "finder": finder,
        "finder_position": position,
        "modules": count,
        "runs": runs,
        "variants": summary,
        "per_import_p25_p75_ns": {
            name: [quantile(v, 0.25), quantile(v, 0.75)] for name, v in samples.items()
        },
        "median_ms_per_1000": {
            name: statistics.median(v) * count / 1e6 for name, v in samples.items()
        },
    }
