"""The README's "In a notebook" and "In your test suite" sections tell the truth: their cells,
test file and commands run as written (simulator kernels) and print the tables shown.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO
from test_ipython import run_cells, shown_text
from test_pytest_plugin import PLUGIN

README = (REPO / "README.md").read_text()
SOURCE = README
SHOWN_PROJECT = "/home/me/project"  # the folder the docs show the commands run in


def blocks(marker: str) -> list[str]:
    """Every fenced block right after `<!-- readme-test: marker -->`, in order."""
    found = re.findall(rf"<!-- readme-test: {marker} -->\n```\w*\n(.*?)```", SOURCE, re.DOTALL)
    assert found, f"no block marked {marker!r}"
    return found


def block(marker: str) -> str:
    [only] = blocks(marker)
    return only


def test_the_notebook_cells_show_the_table_shown(tmp_path: Path) -> None:
    cells = blocks("notebook-cell")
    results = run_cells(tmp_path, *cells)
    assert [r["error"] for r in results] == [None] * len(cells)
    assert shown_text(results[-1]) == block("notebook-output")


def pytest_in(folder: Path, command: str) -> subprocess.CompletedProcess:
    """Run one of the docs' `pytest ...` lines in `folder`, with kname's plugin from here."""
    words = command.split(" #")[0].split()
    assert words[0] == "pytest", command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    env.update(
        NUMBA_ENABLE_CUDASIM="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        COLUMNS="80",
    )
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *PLUGIN, "-p", "no:cacheprovider", *words[1:]],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def assert_shows(output: str, shown: str, folder: Path) -> None:
    """The lines of `shown` appear, one after another, in `output` (run in `folder`)."""
    lines = output.replace(str(folder), SHOWN_PROJECT).splitlines()
    expected = shown.splitlines()
    starts = [i for i, line in enumerate(lines) if line == expected[0]]
    assert any(lines[i : i + len(expected)] == expected for i in starts), output


def test_the_test_suite_commands_print_what_is_shown(tmp_path: Path) -> None:
    suite = block("pytest-suite")
    (tmp_path / "test_solver.py").write_text(suite)
    commands = [line for line in block("pytest-commands").splitlines() if line.strip()]
    assert len(commands) == 4
    outputs = []
    for command in commands:
        done = pytest_in(tmp_path, command)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    assert_shows(outputs[1], block("pytest-summary"), tmp_path)
    assert (tmp_path / "launches.json").read_text() == block("pytest-report")

    # The change the docs describe: relax sweeps twice.
    assert "    for _ in range(sweeps):\n" in suite
    (tmp_path / "test_solver.py").write_text(suite.replace("range(sweeps)", "range(2 * sweeps)"))
    failed = pytest_in(tmp_path, commands[3])
    assert failed.returncode == pytest.ExitCode.TESTS_FAILED
    assert_shows(failed.stdout, block("pytest-baseline-failure"), tmp_path)
    assert "FAILED test_solver.py::test_step_count - AssertionError: assert 60 == 30" in (
        failed.stdout
    )


def test_the_fixture_failure_is_shown_as_pytest_prints_it(tmp_path: Path) -> None:
    suite = block("pytest-suite")
    assert "relax(out, x, sweeps=30)" in suite
    (tmp_path / "test_solver.py").write_text(suite.replace("sweeps=30", "sweeps=29"))
    failed = pytest_in(tmp_path, "pytest")
    assert failed.returncode == pytest.ExitCode.TESTS_FAILED
    assert_shows(failed.stdout, block("pytest-fixture-failure"), tmp_path)
