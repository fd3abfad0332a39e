"""Reliability over long runs: bounded memory and NVTX names, exact census, unchanged results.

The caches' bounds (site_cache.MAX_SITES, callsite.MAX_CODES, counters.MAX_COUNTED,
ranges.MAX_NAMES) are lowered in these programs, so the bound is reached, and then passed many
times over, within seconds; the code that enforces them is the same at the default bounds.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tracemalloc
import types

import pytest
from support import cleaned, line_of
from support.nvtx_capture import capture_env
from test_reliability import NOOP_TARGET, count_ranges, run_program, write_program

import kname
from kname import callsite, counters, naming, site_cache

pytestmark = [pytest.mark.slow, pytest.mark.launches]

GENERATED = """\
import json
import os
import sys

import kname
import noop
from kname import callsite, counters, site_cache
from kname import ranges

functions, lines, repeat, bound, codes = (int(a) for a in sys.argv[1:6])
site_cache.MAX_SITES = ranges.MAX_NAMES = bound
counters.MAX_COUNTED = 2 * bound
callsite.MAX_CODES = codes


def rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# functions x lines call sites, each launching `repeat` times in a row.
body = "".join(f"        launch({i})\\n" for i in range(lines))
source = "".join(
    f"def f_{k}(launch):\\n    for _ in range({repeat}):\\n{body}\\n" for k in range(functions)
)
namespace = {"__name__": "generated"}
exec(compile(source, "generated.py", "exec"), namespace)
most = {"sites": 0, "names": 0, "codes": 0}
memory = []
for k in range(functions):
    namespace[f"f_{k}"](noop.launch)
    most["sites"] = max(most["sites"], len(callsite.sites))
    most["names"] = max(most["names"], len(ranges._ranges))
    # kname's own wrapper code is decided on once and kept beside the bounded decisions
    decided = len(callsite._kinds) - len(callsite._wrapper_code_ids)
    most["codes"] = max(most["codes"], decided)
    if k % (functions // 10) == functions // 10 - 1:
        memory.append(rss())
census = kname.names()
print(json.dumps({"most": most, "memory": memory, "total": sum(census.values()),
                  "counted": len(counters.launch_counts)}))
"""


def scan_log(path) -> dict[str, int]:
    """Count kname's events in a long NVTX log, and check its one thread's push/pop nesting."""
    counts = {"push": 0, "pop": 0, "string": 0, "deepest": 0, "negative": 0}
    depth = 0
    with open(path, "rb") as log:
        for line in log:
            kind, domain, _ = line.split(b"\t", 2)
            if domain != b"kname":
                continue
            if kind == b"push":
                depth += 1
                counts["push"] += 1
                counts["deepest"] = max(counts["deepest"], depth)
            elif kind == b"pop":
                depth -= 1
                counts["pop"] += 1
                counts["negative"] += depth < 0
            elif kind == b"string":
                counts["string"] += 1
    counts["open"] = depth
    return counts


def test_1_000_000_launches_from_200_000_sites_stay_within_bounds_of_10_000(
    kname_venv, inject_lib, tmp_path, hot_path
) -> None:
    """Full scale in launches and call sites; the cache bounds lowered from 100 000 to 10 000
    (and MAX_CODES to 100), so they are reached early and passed 20 times over."""
    functions, lines, repeat, bound, codes = 2000, 100, 5, 10_000, 100
    program = write_program(tmp_path, GENERATED)
    log = tmp_path / "nvtx.log"
    environ = {k: v for k, v in os.environ.items() if not cleaned(k, ("KNAME", "_KNAME"))}
    environ.pop("PYTHONPATH", None)
    environ.update(NOOP_TARGET, **capture_env(inject_lib, log))
    args = [str(n) for n in (functions, lines, repeat, bound, codes)]
    done = subprocess.run(
        [str(kname_venv.python), str(program), *args], capture_output=True, text=True,
        env=environ, cwd=program.parent, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    launches = functions * lines * repeat
    # The caches never held more than their bounds (+1: the one shared overflow name). The C
    # wrapper judges a user's line itself, keeping no decision: its bound is the Python path's.
    most = out["most"]
    assert {"sites": most["sites"], "names": most["names"]} == {"sites": bound, "names": bound + 1}
    assert (most["codes"] == codes) if hot_path == "python" else (most["codes"] <= codes)
    # Memory is flat once the bounds are reached (within 4 MiB of noise on a ~400 MiB process
    # that holds the 200 000-line generated module).
    assert max(out["memory"][2:]) - out["memory"][1] < 4 * 2**20, out["memory"]
    # No launch went uncounted: evicted sites keep their counts, past the bound under one name.
    assert out["total"] == launches
    assert out["counted"] <= 2 * bound + 1
    events = scan_log(log)
    # Every launch had its range, properly closed; NVTX strings stayed within the bound too.
    assert events == {
        "push": launches, "pop": launches, "string": bound + 1, "deepest": 1, "negative": 0,
        "open": 0,
    }  # fmt: skip


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):
    """kname installed in this process on a fake target module, undone afterwards."""
    module = types.ModuleType("reliability_bounded_gpu")
    exec("def launch(x):\n    return x\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(naming, "_roots", None)
    for variable in [v for v in os.environ if cleaned(v, ("KNAME",))]:
        monkeypatch.delenv(variable)
    kname.install(targets=[f"{module.__name__}:launch"])
    yield module


def test_traced_memory_is_flat_once_the_caches_are_full(installed, monkeypatch) -> None:
    """In-process, under tracemalloc: 100 000 launches from 20 000 sites, bounds of 1000 sites,
    2000 counted names and 50 code objects; Python's traced memory does not grow once the bounds
    are reached."""
    monkeypatch.setattr(site_cache, "MAX_SITES", 1000)
    monkeypatch.setattr(counters, "MAX_COUNTED", 2000)
    monkeypatch.setattr(callsite, "MAX_CODES", 50)
    functions, lines = 200, 100
    body = "".join(f"        launch({i})\n" for i in range(lines))
    source = "".join(
        f"def f_{k}(launch):\n    for _ in range(5):\n{body}\n" for k in range(functions)
    )
    namespace = {"__name__": "generated"}
    exec(compile(source, "generated.py", "exec"), namespace)
    memory = []
    tracemalloc.start()
    try:
        for k in range(functions):
            namespace[f"f_{k}"](installed.launch)
            assert len(callsite.sites) <= 1000
            if k % 20 == 19:
                memory.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    assert sum(kname.names().values()) == functions * lines * 5
    # From the third checkpoint on (60 functions, 6000 sites seen: both bounds reached), any
    # change is noise.
    assert max(memory[3:]) - memory[2] < 64 * 1024, memory


# --------------------------------------------------------------------------
# Same results with kname on and off
# --------------------------------------------------------------------------

NUMERIC = """\
import hashlib
import math
import sys

import numpy as np
from numba import cuda


@cuda.jit(device=True)
def smooth(v):
    return math.sin(v) * math.exp(-v * v) + math.sqrt(abs(v)) / 3.0


@cuda.jit
def axpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def transform(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = smooth(x[i]) + out[i] * 0.5


@cuda.jit
def mix(out, seeds):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = (seeds[i] * 1103515245 + 12345) % 2147483648


rng = np.random.default_rng(20240601)
x = rng.standard_normal(256)
y = rng.standard_normal(256).astype(np.float32)
seeds = rng.integers(0, 2**31, 256, dtype=np.int64)
out = np.zeros(256)
out32 = np.zeros(256, dtype=np.float32)
ints = np.zeros(256, dtype=np.int64)
for step in range(3):
    axpy[4, 64](out, 0.75, x, out)  # axpy-line
    transform[4, 64](out, x)  # transform-line
    axpy[2, 128](out32, np.float32(1.5), y, out32)
    mix.forall(256)(ints, seeds)
    seeds = ints.copy()
digest = hashlib.sha256(b"".join(a.tobytes() for a in (out, out32, ints))).hexdigest()
print(digest, out[:2].tolist())
"""

MODES = {
    "off": {},
    "nvtx": {"KNAME": "1"},
    "census": {"KNAME": "1", "KNAME_MODE": "census"},
    "rename": {"KNAME": "1", "KNAME_MODE": "rename"},  # as nvtx on the simulator; GPU: the H200
}


def test_a_numba_program_gives_bit_identical_results_with_kname_on_and_off(
    kname_venv, inject_lib, tmp_path
) -> None:
    outputs = {}
    for mode, env in MODES.items():
        done, capture = run_program(
            kname_venv, inject_lib, tmp_path, NUMERIC, env={"NUMBA_ENABLE_CUDASIM": "1", **env}
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", mode
        outputs[mode] = done.stdout
        ranges = count_ranges(capture)
        if mode in ("nvtx", "rename"):  # kname really was at work
            assert ranges[f"<module> prog.py:{line_of(NUMERIC, 'axpy-line')}"] == 3
            assert sum(ranges.values()) == 12
        else:
            assert ranges == {}
    assert len(set(outputs.values())) == 1, outputs
    assert len(outputs["off"].split()[0]) == len(hashlib.sha256().hexdigest())
