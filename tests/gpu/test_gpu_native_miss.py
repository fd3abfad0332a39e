"""On a GPU: real kernels launched from new lines get from the C wrapper's miss path the names
Python's rules give them (tests/gpu/native_miss_demo.py; issue 43).

Marked `gpu`, skipped without a CUDA driver. For each of numba-cuda and CuPy installed: the
names made with C's naming equal those Python makes alone, one per line, and C named them (its
file in NativeMiss.places). At least one of the two libraries must be installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REPO, gpu_missing_reason

pytestmark = pytest.mark.gpu

DEMO = REPO / "tests" / "gpu" / "native_miss_demo.py"


def test_kernels_from_new_lines_get_the_same_names_from_c_as_from_python(tmp_path) -> None:
    if reason := gpu_missing_reason():
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(DEMO), str(tmp_path)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    if result["hot_path"] != "C":
        pytest.skip(f"no C hot path: {result['hot_path']}")
    assert not [row for row in result.values() if str(row).startswith("failed")], result
    ran = {lib: row for lib, row in result.items() if isinstance(row, dict)}
    assert ran, result
    for lib, row in ran.items():
        assert row["c"] == row["python"], lib
        assert len(row["c"]) == 12, (lib, row["c"])
        assert any(file.endswith(f"miss_{lib}.py") for file in row["in_c"]), (lib, row)
