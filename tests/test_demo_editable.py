"""examples/demo.py after an editable install: KNAME=1 is set but no start-up gate runs.

`pip install -e .` puts the checkout on sys.path through a .pth of its own and writes no
kname.pth; the venv here is made that way (the checkout by path .pth, no kname.pth anywhere).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import REPO, Venv, make_venv

pytestmark = pytest.mark.slow

DEMO = str(REPO / "examples" / "demo.py")
SIMULATOR = {"NUMBA_ENABLE_CUDASIM": "1", "KNAME_SKIP": "demo_launchers"}


@pytest.fixture
def editable_venv(tmp_path: Path) -> Venv:
    """A venv with the checkout importable as `pip install -e` leaves it: no kname.pth."""
    made = make_venv(tmp_path / "venv")
    (made.site_packages / "__editable__.kname-0.1.0.pth").write_text(f"{REPO}\n")
    assert not list(made.root.rglob("kname.pth"))
    return made


def test_the_demo_says_the_gate_is_missing_when_kname_is_on_but_did_not_start(
    editable_venv: Venv,
) -> None:
    result = editable_venv.python_run(DEMO, env={**SIMULATOR, "KNAME": "1"})
    assert result.returncode == 1, result.stderr
    said = result.stdout.splitlines()[-1]
    assert "kname is off: run with KNAME=1" not in said
    assert "KNAME=1" in said and "start-up gate (kname.pth) was not found" in said
    assert "kname run -- python examples/demo.py" in said and "pip install ." in said


def test_kname_run_starts_the_demo_the_editable_install_left_off(editable_venv: Venv) -> None:
    result = editable_venv.python_run(
        "-m", "kname", "run", "--", str(editable_venv.python), DEMO, env=SIMULATOR
    )
    assert result.returncode == 0, result.stderr
    assert "step demo.py:50" in result.stdout


def test_the_demo_still_says_kname_is_off_when_the_switch_is_off(editable_venv: Venv) -> None:
    result = editable_venv.python_run(DEMO, env={**SIMULATOR, "KNAME": "0"})
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[-1].startswith("kname is off: run with KNAME=1")
