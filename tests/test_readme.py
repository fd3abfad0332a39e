"""The README tells the truth: its commands and snippets that need no GPU run as written.

GPU-only recipes (ncu, nsys) are checked on the H200 by tests/test_gpu_*.py, not here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from support import REPO, Venv, kernels

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()

APP = kernels.program("""\
x = np.arange(8.0)
out = np.zeros(8)
for _ in range(3):
    axpy[1, 8](out, 2.0, x)
axpy[1, 8](out, 3.0, x)
print("app ran")
""")


def indented_commands() -> list[str]:
    """The README's 4-space-indented shell lines (its command blocks), comments removed."""
    lines = re.findall(r"^    (\S.*)$", README, flags=re.MULTILINE)
    return [line.split("  #")[0].strip() for line in lines]


def marked_block(marker: str) -> str:
    """The fenced block right after `<!-- readme-test: marker -->`."""
    match = re.search(rf"<!-- readme-test: {marker} -->\n```\w*\n(.*?)```", README, re.DOTALL)
    assert match, f"README has no block marked {marker!r}"
    return match.group(1)


def readme_test_command() -> str:
    return next(c for c in indented_commands() if "pytest" in c and "pip install" in c)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    assert readme_test_command() in CI_RUN.splitlines()


def test_ci_fails_when_any_step_of_the_test_command_fails(tmp_path: Path) -> None:
    # .ci/run with each step of the command made `true` but one, `false`, and nothing else run.
    test_command = readme_test_command()
    steps = test_command.split(" && ")
    script = CI_RUN.replace('cd "$(dirname "$0")/.."', f"cd {tmp_path}")
    script = script.replace("rm -rf .venv", "true").replace(".venv/bin/ruff check .", "echo ruff")
    for failing in range(len(steps)):
        command = " && ".join("false" if n == failing else "true" for n in range(len(steps)))
        done = subprocess.run(
            ["bash", "-c", script.replace(test_command, command)], capture_output=True, text=True
        )
        assert (done.returncode, done.stdout) == (1, ""), (steps[failing], done)


def test_the_readme_demo_command_is_the_demo_in_examples() -> None:
    demo_command = indented_commands()[0]
    assert demo_command.endswith("examples/demo.py")
    assert "KNAME=1" in demo_command and '".[auto]"' in demo_command


def test_the_demo_prints_what_the_readme_shows(kname_venv: Venv) -> None:
    env = {"KNAME": "1", "KNAME_SKIP": "demo_launchers"}
    result = kname_venv.python_run(str(REPO / "examples" / "demo.py"), env=env)
    assert result.returncode == 0, result.stderr
    if "on the GPU" in result.stdout:
        pytest.skip("this machine has a GPU; the README shows the simulator's output")
    assert result.stdout == marked_block("demo-output")


def test_the_live_session_snippet_runs(kname_venv: Venv) -> None:
    result = kname_venv.python_run("-c", marked_block("python"), env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def run_shell(command: str, venv: Venv, cwd: Path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    environ.update(NUMBA_ENABLE_CUDASIM="1", PATH=f"{venv.root / 'bin'}:{environ['PATH']}")
    environ.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=environ, capture_output=True, text=True
    )


def test_the_census_recipes_run_as_written(kname_venv: Venv, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    # The CI-check recipe compares against a census saved earlier.
    saved = run_shell("kname run --report before.json -- python app.py", kname_venv, tmp_path)
    assert saved.returncode == 0, saved.stderr
    recipes = [c for c in indented_commands() if c.startswith(("kname ", "KNAME=1 KNAME_REPORT"))]
    assert len(recipes) >= 5, recipes
    outputs = {}
    for command in recipes:
        result = run_shell(command, kname_venv, tmp_path)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        outputs[command] = result.stdout + result.stderr
    table = outputs["KNAME=1 KNAME_REPORT=- python app.py"]
    assert "kname census: 4 launches from 2 call sites" in table
    assert "<module> app.py:15" in table and "<module> app.py:16" in table
    diff = next(out for command, out in outputs.items() if "--diff" in command)
    assert "before.json (4 launches) -> after.json (4 launches): no change" in diff
