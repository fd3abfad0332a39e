"""On a real GPU: Nsight Compute shows each numba-cuda kernel of the demo under its call site.

Needs a CUDA driver, `ncu` on PATH and kname's wheel installed in this Python (the .pth gate);
skipped otherwise (always in CI, which has no GPU).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support import REPO, gpu_missing_reason, line_of

pytestmark = pytest.mark.gpu

DEMO = REPO / "examples" / "demo.py"


def missing_reason() -> str | None:
    if reason := gpu_missing_reason():
        return reason
    if not (Path(sysconfig.get_paths()["purelib"]) / "kname.pth").is_file():
        return "kname's wheel is not installed in this Python (its kname.pth is missing)"
    return None


@pytest.fixture(scope="module")
def ncu_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    assert importlib.util.find_spec("numba") is not None
    env = dict(os.environ, KNAME="1", KNAME_SKIP="demo_launchers")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    result = subprocess.run(
        ["ncu", "--clock-control", "none", "--nvtx", "--print-nvtx-rename", "kernel",
         "--print-summary", "per-kernel", sys.executable, str(DEMO)],
        capture_output=True, text=True, env=env, cwd=tmp_path_factory.mktemp("ncu"),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def ncu_output(ncu_run: subprocess.CompletedProcess) -> str:
    return ncu_run.stdout


def test_kname_says_nothing_of_ncus_own_python(ncu_run: subprocess.CompletedProcess) -> None:
    """ncu's rules interpreter reads the program's site-packages and KNAME=1, and no extension
    loads in it: it printed `kname: could not start (ImportError: ... undefined symbol:
    PyExc_SystemError)` on every run before kname learnt to stay quiet there."""
    said = [line for line in ncu_run.stderr.splitlines() if line.startswith("kname:")]
    assert said == [], said


def test_the_demo_ran_on_the_gpu(ncu_output: str) -> None:
    assert "kname demo on the GPU: 10 launches" in ncu_output


@pytest.mark.parametrize(
    ("function", "marker"),
    [
        ("step", "# one line"),
        ("step", "# ... and the next"),
        ("step", "# through the helper"),
        ("main", "# forall:"),
    ],
)
def test_ncu_renames_each_kernel_by_its_call_site(ncu_output: str, function, marker) -> None:
    source = DEMO.read_text()
    name = f"{function} demo.py:{line_of(source, marker)}"
    profiled = [line for line in ncu_output.splitlines() if name in line]
    # The demo's own table prints each name once; ncu's summary must show it as a kernel too.
    assert len(profiled) >= 2, f"{name!r} not in ncu's kernel summary:\n{ncu_output[-3000:]}"
