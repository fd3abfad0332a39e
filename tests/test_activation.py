"""Zero-code-change activation, end to end: a user package installed (non-editable) next to
kname's wheel launches real numba kernels on the CUDA simulator, and the NVTX ranges a profiler
would record (captured by the injection library) name exactly the expected call sites.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Venv, line_of, make_venv, write_package
from support.nvtx_capture import Capture, run_captured

pytestmark = pytest.mark.slow

KERNELS = """\
from numba import cuda


@cuda.jit(device=True)
def twice(v):
    return 2 * v


@cuda.jit
def double(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = twice(x[i])


@cuda.jit
def fail_on_purpose(out):
    out[10_000] = 1  # out of bounds: the simulator raises IndexError
"""

LAUNCHERS = """\
def launch_1d(kernel, *args):
    kernel[1, args[0].size](*args)  # helper-line
"""

SOLVER = """\
import sys

import numpy as np

import kname
from kapp.kernels import double, fail_on_purpose
from kapp.launchers import launch_1d


def step(out, x):
    double[1, 8](out, x)  # first-line
    double[1, 8](out, out)  # second-line


def through_helper(out, x):
    launch_1d(double, out, x)  # helper-caller


def main():
    x = np.arange(8.0)
    out = np.zeros(8)
    for _ in range(3):
        step(out, x)
    through_helper(out, x)
    double.forall(8)(out, x)  # forall-line
    if "--toggle" in sys.argv:
        kname.disable()
        double[1, 8](out, x)  # disabled-line
        kname.enable()
        with kname.paused():
            double[1, 8](out, x)  # paused-line
        double[1, 8](out, x)  # enabled-again-line
    if "--raise" in sys.argv:
        try:
            fail_on_purpose[1, 1](out)  # raising-line
        except IndexError as exc:
            print("caught", type(exc).__name__)
    print("result", out.tolist())


if __name__ == "__main__":
    main()
"""

SIM = {"NUMBA_ENABLE_CUDASIM": "1"}


def line(marker: str) -> int:
    return line_of(SOLVER, marker)


@pytest.fixture(scope="module")
def app_venv(tmp_path_factory: pytest.TempPathFactory, kname_wheel: Path) -> Venv:
    """A venv with kname's wheel and a user package `kapp`, both really installed."""
    root = tmp_path_factory.mktemp("activation")
    source = write_package(
        root / "kapp-src",
        "kapp",
        {"kernels.py": KERNELS, "launchers.py": LAUNCHERS, "solver.py": SOLVER},
    )
    venv = make_venv(root / "env")
    venv.install(str(kname_wheel), str(source))
    return venv


def run_app(venv: Venv, inject_lib: Path, tmp_path: Path, *args: str, env=None):
    """Run `python <args> -m kapp.solver` in the venv under NVTX capture."""
    environ = {k: None for k in ("KNAME", "KNAME_SKIP", "KNAME_TARGETS", "PYTHONPATH")}
    environ.update(SIM)
    environ.update(env or {})
    result, capture = run_captured(
        [str(venv.python), *args], inject_lib, tmp_path, env=environ, cwd=venv.root
    )
    assert result.returncode == 0, result.stderr
    return result, capture


def kname_ranges(capture: Capture) -> list[str]:
    return capture.ranges("kname")


def test_kname_env_names_every_launch_after_its_line(app_venv, inject_lib, tmp_path) -> None:
    result, capture = run_app(
        app_venv, inject_lib, tmp_path, "-m", "kapp.solver",
        env={"KNAME": "1", "KNAME_SKIP": "kapp.launchers"},
    )  # fmt: skip
    first = f"step kapp/solver.py:{line('first-line')}"
    second = f"step kapp/solver.py:{line('second-line')}"
    helper = f"through_helper kapp/solver.py:{line('helper-caller')}"
    forall = f"main kapp/solver.py:{line('forall-line')}"
    assert kname_ranges(capture) == [first, second] * 3 + [helper, forall]
    assert capture.balanced(), capture.stack_errors()
    assert capture.max_depth("kname") == 1
    assert sorted(capture.registered_strings("kname")) == sorted({first, second, helper, forall})
    assert "result" in result.stdout
    assert result.stderr == ""


def test_dash_x_kname_names_the_same_launches(app_venv, inject_lib, tmp_path) -> None:
    _, with_env = run_app(app_venv, inject_lib, tmp_path, "-m", "kapp.solver", env={"KNAME": "1"})
    _, with_x = run_app(app_venv, inject_lib, tmp_path, "-X", "kname", "-m", "kapp.solver")
    assert kname_ranges(with_x) == kname_ranges(with_env)
    assert len(kname_ranges(with_x)) == 8


def test_without_kname_skip_the_helper_line_is_the_name(app_venv, inject_lib, tmp_path) -> None:
    _, capture = run_app(app_venv, inject_lib, tmp_path, "-m", "kapp.solver", env={"KNAME": "1"})
    helper_line = line_of(LAUNCHERS, "helper-line")
    assert f"launch_1d kapp/launchers.py:{helper_line}" in kname_ranges(capture)


def test_switched_off_there_are_no_ranges_and_no_kname(app_venv, inject_lib, tmp_path) -> None:
    result, capture = run_app(
        app_venv, inject_lib, tmp_path, "-c",
        "import sys, runpy; runpy.run_module('kapp.solver', run_name='__main__');"
        "print('kname imported:', 'kname._startup' in sys.modules, 'wrapt' in sys.modules)",
    )  # fmt: skip
    assert kname_ranges(capture) == []
    assert "kname imported: False False" in result.stdout


def test_disable_paused_and_enable_switch_naming_at_run_time(app_venv, inject_lib, tmp_path):
    _, capture = run_app(
        app_venv, inject_lib, tmp_path, "-m", "kapp.solver", "--toggle", env={"KNAME": "1"}
    )
    ranges = kname_ranges(capture)
    assert f"main kapp/solver.py:{line('disabled-line')}" not in ranges
    assert f"main kapp/solver.py:{line('paused-line')}" not in ranges
    assert ranges[-1] == f"main kapp/solver.py:{line('enabled-again-line')}"


def test_a_kernel_that_raises_pops_its_range_and_the_error_is_unchanged(
    app_venv, inject_lib, tmp_path
) -> None:
    result, capture = run_app(
        app_venv, inject_lib, tmp_path, "-m", "kapp.solver", "--raise", env={"KNAME": "1"}
    )
    assert "caught IndexError" in result.stdout
    assert kname_ranges(capture)[-1] == f"main kapp/solver.py:{line('raising-line')}"
    assert capture.balanced(), capture.stack_errors()


UNINSTALL_PROBE = """\
import numba.cuda.simulator.kernel as sim
original = sim.FakeCUDAKernel.__dict__["__call__"]
import kname
kname.install()
wrapped = sim.FakeCUDAKernel.__dict__["__call__"]
kname.uninstall()
print(wrapped is not original, wrapped.__wrapped__ is original,
      sim.FakeCUDAKernel.__dict__["__call__"] is original)
"""


def test_a_target_imported_before_install_is_wrapped_and_uninstall_restores_it(
    app_venv, inject_lib, tmp_path
) -> None:
    result, _ = run_app(app_venv, inject_lib, tmp_path, "-c", UNINSTALL_PROBE)
    assert result.stdout.split() == ["True", "True", "True"]
