"""On a GPU: the notebook cell census and the pytest plugin with real numba-cuda kernels, under
Nsight Compute's NVTX renaming, so the names the tables show are the names the profiler shows.

Needs a CUDA driver and `ncu` on PATH (and IPython for the notebook test); skipped otherwise
(always in CI, which has no GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, gpu_missing_reason
from test_pytest_plugin import PLUGIN, suite
from test_pytest_plugin import STEP_LINE as SUITE_STEP_LINE

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.gpu

NCU = ("ncu", "--clock-control", "none", "--nvtx", "--print-nvtx-rename", "kernel",
       "--print-summary", "per-kernel")  # fmt: skip
# numba-cuda 0.30 still calls numpy.row_stack, which numpy 2.5 removed: alias it in the
# programs themselves, never inside kname.
ROW_STACK = "import numpy\nnumpy.row_stack = getattr(numpy, 'row_stack', numpy.vstack)\n"


@pytest.fixture(autouse=True)
def gpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    reason = gpu_missing_reason()
    if reason:
        pytest.skip(reason)
    for name in list(os.environ):
        if name.startswith(("KNAME", "NVTX_", "NUMBA_ENABLE_CUDASIM")):
            monkeypatch.delenv(name)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )


def test_a_notebook_cell_census_names_real_kernels_as_ncu_shows_them(tmp_path: Path) -> None:
    # Imported here: without IPython only this test is skipped, not the plugin's.
    pytest.importorskip("IPython")
    from test_ipython import COUNTED, DIRECT_LINE, KERNELS, SHELL, STEP_LINE

    cells = ["%load_ext kname", ROW_STACK + KERNELS, COUNTED]
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "shell.py").write_text(SHELL)
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"))
    done = subprocess.run(
        [*NCU, sys.executable, str(tmp_path / "shell.py"), str(tmp_path / "cells.json")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    results = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("[{")))
    step_line = STEP_LINE + ROW_STACK.count("\n")
    table = results[2]["outputs"][0]["text/plain"].splitlines()
    assert table[0] == "kname census of cell 3: 4 launches from 2 call sites", table
    assert table[2].startswith(f"step <cell 2>:{step_line} ")
    assert table[3].startswith(f"<module> <cell 3>:{DIRECT_LINE} ")
    for name in (f"step <cell 2>:{step_line}/axpy", f"<module> <cell 3>:{DIRECT_LINE}/axpy"):
        assert name in done.stdout, f"{name!r} not in ncu's summary:\n{done.stdout[-4000:]}"


def test_a_pytest_session_reports_real_kernels_per_test(pytester, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(pytester.path / "home"))  # as in test_pytest_plugin.py
    pytester.makepyfile(test_gpu=ROW_STACK + suite(steps=3))
    step_line = SUITE_STEP_LINE + ROW_STACK.count("\n")
    result = pytester.run(
        *NCU, sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider",
        "--kname-report", "launches.json", timeout=600,
    )  # fmt: skip
    assert result.ret == 0, "\n".join(result.outlines[-60:] + result.errlines[-20:])
    tests = json.loads((pytester.path / "launches.json").read_text())["tests"]
    assert tests["test_gpu.py::test_steps"]["sites"][0]["name"] == f"step test_gpu.py:{step_line}"
    assert tests["test_gpu.py::test_steps"]["total_launches"] == 3
    assert any(f"step test_gpu.py:{step_line}/axpy" in line for line in result.outlines)
