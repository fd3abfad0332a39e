"""On a GPU: kname profile's whole-program cost measured inside one process
(benchmarks/profile_inprocess.py, issue 43) runs every variant and reads each with its interval.

Marked `gpu`, skipped without cupti-python or a library of the mixed program. Checks the
harness, not a timing: every round ran each variant once (--split: every piece of kname's cost
too); kname's session counted the program's launches (so its blocks profiled); the floor and the
A/A pair have rows; each row's median lies within its 95% interval; CUPTI called the floor's
callback at the enter and the exit of each launch call kname counted, and never when only
subscribed. The numbers themselves go to docs/benchmarks.md, not into a test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from _common import no_gpu
from profile_inprocess import SPLIT_STEPS

pytestmark = pytest.mark.gpu


def test_the_in_process_benchmark_reads_kname_the_floor_and_the_a_a_pair(tmp_path) -> None:
    if no_gpu():
        pytest.skip(no_gpu())
    if importlib.util.find_spec("cupti") is None:
        pytest.skip("cupti-python is not installed")
    if not any(importlib.util.find_spec(name) for name in ("cupy", "torch", "numba")):
        pytest.skip("none of the mixed program's libraries is installed")
    out = tmp_path / "inprocess.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    script = REPO / "benchmarks" / "profile_inprocess.py"
    done = subprocess.run(
        [sys.executable, str(script), "--max-seconds", "40", "--no-proton", "--split", "--json",
         str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["lines"], result["skipped"]
    rows = result["phase_kname"]
    variants = {"off-again", "floor", "kname", "recorder", "floor-subscribed", "kname-unwrapped"}
    assert variants <= set(rows), result["notes"]
    assert len({row["rounds"] for row in rows.values()}) == 1  # a round is whole or not kept
    assert min(row["rounds"] for row in rows.values()) >= 20
    assert result["launches_per_iteration"] >= len(result["lines"])  # counted by the session
    for row in rows.values():
        for clock in ("cpu", "wall"):
            assert row[clock]["low_us"] <= row[clock]["added_us"] <= row[clock]["high_us"]
    assert "kname above CUPTI's floor (cpu)" in done.stdout
    calls = result["callbacks_per_iteration"]
    enter_and_exit = 2 * result["launches_per_iteration"]  # the launch calls kname counted
    assert sum(calls["floor"].values()) == pytest.approx(enter_and_exit, rel=0.05), calls
    assert sum(calls["floor-subscribed"].values()) == 0
    assert set(result["split"]) == {label for label, _, _ in SPLIT_STEPS}
