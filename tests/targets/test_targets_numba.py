"""The numba target: launches of numba kernels (`kernel[grid, block]`, `forall`) named after the
user's line, and device functions, which are no launches, left alone.

On the CUDA simulator (NUMBA_ENABLE_CUDASIM=1), in a subprocess, as the user runs a program; the
NVTX ranges are captured by the injection library. Rename mode's numba side is in test_rename.py.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from support import line_of
from support.nvtx_capture import run_captured
from test_callsite import clean_env, run_python

pytestmark = pytest.mark.launches


SIMULATOR = """
import json

import kname

kname.install()

import numpy as np
from numba import cuda


@cuda.jit(device=True)
def twice(x):
    return 2 * x


@cuda.jit
def axpy(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = twice(x[i])


@cuda.jit
def scale(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = twice(out[i])


def step(out, x):
    axpy[2, 4](out, x)  # L:direct
    axpy.forall(out.size)(out, x)  # L:forall


out, x = np.zeros(8), np.arange(8.0)
for _ in range(3):
    step(out, x)
scale[1, 8](out)  # L:scale
assert (out == 4 * x).all(), out
print(json.dumps(kname.names()))
"""


def simulator_script(tmp_path: Path) -> tuple[Path, dict[str, str | None]]:
    script = tmp_path / "sim_app.py"
    script.write_text(textwrap.dedent(SIMULATOR))
    return script, clean_env(NUMBA_ENABLE_CUDASIM="1")


def simulator_names() -> dict[str, int]:
    return {
        f"step sim_app.py:{line_of(SIMULATOR, 'L:direct')}": 3,
        f"step sim_app.py:{line_of(SIMULATOR, 'L:forall')}": 3,
        f"<module> sim_app.py:{line_of(SIMULATOR, 'L:scale')}": 1,
    }


def test_simulator_launches_forall_and_device_calls_are_named_by_user_lines(tmp_path) -> None:
    script, env = simulator_script(tmp_path)
    # forall names the user's line, not numba's; device function calls add no sites.
    assert run_python(script, env, tmp_path) == simulator_names()


def test_simulator_ranges_are_one_per_launch_and_balanced(inject_lib, tmp_path) -> None:
    script, env = simulator_script(tmp_path)
    done, cap = run_captured([sys.executable, str(script)], inject_lib, tmp_path, env=env,
                             cwd=tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = simulator_names()
    direct, forall, scale = expected
    assert cap.ranges("kname") == [direct, forall] * 3 + [scale]
    assert cap.balanced(), cap.stack_errors()
    assert cap.max_depth("kname") == 1  # device functions open no nested range
