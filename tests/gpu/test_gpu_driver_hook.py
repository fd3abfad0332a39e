"""On a GPU, under Nsight Compute: every kernel of a PyTorch step, of CuPy's ufuncs and of a jitted
JAX function is shown under its program's own line, with KNAME=1 the only setting (issue 38).

Marked `gpu`, skipped without ncu or the library. Runs `KNAME=1 ncu --nvtx --print-nvtx-rename
kernel python tests/gpu/hook_<library>.py` from kname's checkout and reads the kernel names ncu
prints (tests/gpu/ncu_kernels.py): at least 95% must name the program's file, and a PyTorch
step's backward kernels (launched on autograd's thread) its loss.backward() line.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tests" / "gpu"))
from ncu_kernels import shown_names

pytestmark = pytest.mark.gpu
PROGRAMS = REPO / "tests" / "gpu"


README = (REPO / "README.md").read_text()


@functools.cache
def ncu_output(library: str) -> str:
    """What ncu prints for tests/gpu/hook_<library>.py."""
    if shutil.which("ncu") is None:
        pytest.skip("ncu is not installed")
    if importlib.util.find_spec(library) is None:
        pytest.skip(f"{library} is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    paths = [str(REPO), str(REPO / "kname" / "_bootstrap"), os.environ.get("PYTHONPATH", "")]
    env.update(KNAME="1", PYTHONPATH=os.pathsep.join(filter(None, paths)))
    command = ["ncu", "--clock-control", "none", "--nvtx", "--print-nvtx-rename", "kernel",
               "--metrics", "gpu__time_duration.sum",
               sys.executable, str(PROGRAMS / f"hook_{library}.py")]  # fmt: skip
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=900, check=False, cwd=REPO
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


def run_under_ncu(library: str) -> list[str]:
    """The kernel names ncu shows for tests/gpu/hook_<library>.py, one per launch."""
    output = ncu_output(library)
    names = shown_names(output)
    assert names, output[-6000:]
    return names


def share_named_after(names: list[str], program: str) -> float:
    return sum(program in name for name in names) / len(names)


def line_of(program: str, marker: str) -> int:
    source = (PROGRAMS / program).read_text().splitlines()
    return next(n for n, text in enumerate(source, 1) if re.search(rf"# site: {marker}$", text))


def test_a_torch_training_steps_kernels_are_named_after_its_lines_backward_ones_too() -> None:
    names = run_under_ncu("torch")
    assert share_named_after(names, "hook_torch.py") >= 0.95, names
    backward = f"hook_torch.py:{line_of('hook_torch.py', 'backward')}/"
    assert any(backward in name and "backward" in name for name in names), names


def test_ncu_prints_the_lines_the_readme_shows() -> None:
    """Each line of the README's ncu sample, cut where it says `...`, begins a line of ncu's."""
    shown = re.search(r"<!-- readme-test: ncu-output -->\n```\n(.*?)```", README, re.DOTALL)
    assert shown, "the README has no ncu sample"
    run_under_ncu("torch")  # skips where ncu or torch is missing
    printed = [line.strip() for line in ncu_output("torch").splitlines()]
    for line in shown.group(1).splitlines():
        start = line.strip().split("...")[0]
        assert any(p.startswith(start) for p in printed), f"{start!r} not printed by ncu"


def test_cupys_ufuncs_and_reduction_are_named_after_their_lines() -> None:
    names = run_under_ncu("cupy")
    assert share_named_after(names, "hook_cupy.py") >= 0.95, names


def test_a_jitted_jax_functions_kernels_are_named_after_its_line() -> None:
    names = run_under_ncu("jax")
    assert share_named_after(names, "hook_jax.py") >= 0.95, names
