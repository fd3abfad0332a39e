"""docs/notebook.md and docs/pytest.md tell the truth: their cells, test file and commands run
as written (simulator kernels) and print the tables shown.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, cleaned
from test_ipython import environment, run_cells, shown_text
from test_pytest_plugin import PLUGIN, UNUSED

SOURCE = "".join((REPO / "docs" / name).read_text() for name in ("notebook.md", "pytest.md"))
SHOWN_PROJECT = "/home/me/project"  # the folder the docs show the commands run in


def blocks(marker: str) -> list[str]:
    """Every fenced block right after `<!-- readme-test: marker -->`, in order."""
    found = re.findall(rf"<!-- readme-test: {marker} -->\n```\w*\n(.*?)```", SOURCE, re.DOTALL)
    assert found, f"no block marked {marker!r}"
    return found


def block(marker: str) -> str:
    [only] = blocks(marker)
    return only


def test_the_notebook_cells_show_the_table_shown_without_a_gpu(tmp_path: Path) -> None:
    # As the docs tell users without a GPU: the simulator switched on in the first cell.
    first, *cells = blocks("notebook-cell")
    cells = [block("notebook-without-gpu") + first, *cells]
    env = environment(tmp_path)
    del env["NUMBA_ENABLE_CUDASIM"]
    results = run_cells(tmp_path, *cells, env=env)
    assert [r["error"] for r in results] == [None] * len(cells)
    assert shown_text(results[-1]) == block("notebook-output")


def shell_words(line: str) -> tuple[dict[str, str], list[str]]:
    """One of the docs' command lines: its leading VAR=value settings, and its words."""
    words = line.split(" #")[0].split()
    settings = {}
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        name, value = words.pop(0).split("=", 1)
        settings[name] = value
    return settings, words


def pytest_in(folder: Path, command: str) -> subprocess.CompletedProcess:
    """Run one of the docs' `pytest ...` lines in `folder`, with kname's plugin from here, as a
    user without a GPU runs it: with the settings the docs give for that."""
    settings, words = shell_words(command)
    without_gpu, _ = shell_words(block("pytest-without-gpu"))
    assert words[0] == "pytest" and without_gpu, command
    env = {k: v for k, v in os.environ.items() if not cleaned(k, ("KNAME", "NVTX_", "NUMBA_"))}
    env.update(
        without_gpu,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        COLUMNS="80",
        **settings,
    )
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *PLUGIN, *UNUSED, *words[1:]],
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
    for command in [*commands, block("pytest-without-gpu").strip()]:
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


RAISING_CELL = """\
%%kname
out, x = np.zeros(64), np.ones(64)
step(out, x)
axpy[1, 64](out, 1.0)  # raises: x is missing
"""

RAISING_TESTS = """\
import pytest
from test_solver import axpy, np


def test_caught(kname_census):
    with pytest.raises(TypeError):
        axpy[1, 64](np.zeros(64), 1.0)  # raises: x is missing
    assert kname_census.launches(kernel="axpy") == 1


def test_failed():
    axpy[1, 64](np.zeros(64), 1.0, np.ones(8))  # raises: x is too short
"""


@pytest.mark.launches
def test_a_launch_that_raises_is_still_counted_in_a_cell_and_in_a_test(tmp_path, hot_path):
    _, kernels, _ = blocks("notebook-cell")
    results = run_cells(tmp_path, "%load_ext kname", kernels, RAISING_CELL)
    assert [r["error"] for r in results] == [None, None, "TypeError"]
    assert shown_text(results[2]).splitlines()[0] == (
        "kname census of cell 3: 2 launches from 2 call sites"
    )
    (tmp_path / "test_solver.py").write_text(block("pytest-suite"))
    (tmp_path / "test_raising.py").write_text(RAISING_TESTS)
    done = pytest_in(tmp_path, "pytest test_raising.py --kname-report launches.json")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout
    tests = json.loads((tmp_path / "launches.json").read_text())["tests"]
    assert {test: (t["outcome"], t["total_launches"]) for test, t in tests.items()} == {
        "test_raising.py::test_caught": ("passed", 1),
        "test_raising.py::test_failed": ("failed", 1),
    }
