"""benchmarks/profile_inprocess.py --split on the CPU: every piece of kname profile's cost runs,
CUPTI played by the tests' stand-in libcupti (tests/support/fake_cupti.c), in a subprocess as a
user runs it. No timing is checked: that each variant ran every round, that the floor's
callback took the calls the stand-in made (none with nothing enabled), and that each piece of
the split has its row.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import REPO
from support.cupti_stand_in import COMPILER

from kname import hotpath

SCRIPT = REPO / "benchmarks" / "profile_inprocess.py"
native, WHY = hotpath.choose(True).cupti()


@pytest.mark.skipif(native is None, reason=f"no native CUPTI callback here: {WHY}")
@pytest.mark.skipif(COMPILER is None, reason="no C compiler for the stand-in libcupti")
def test_every_piece_of_the_split_runs_on_the_stand_in_and_the_floor_counts_its_callbacks(
    tmp_path,
) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from profile_inprocess import SPLIT_STEPS

    out = tmp_path / "split.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--noop", "--split", "--rounds", "6", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["notes"] == []  # no variant left out, no round stopped
    variants = {name for _, with_it, without in SPLIT_STEPS for name in (with_it, without)}
    assert set(result["phase_kname"]) == variants - {"off"} | {"off-again"}
    assert {row["rounds"] for row in result["phase_kname"].values()} == {6}
    assert list(result["split"]) == [label for label, _, _ in SPLIT_STEPS]
    # Three launches an iteration (counted by kname's session, over the block's untimed
    # iterations too, settling ones included), each an enter and an exit that reach the floor's
    # callback once its launch APIs are enabled, and never before.
    assert result["launches_per_iteration"] == 3
    calls = result["callbacks_per_iteration"]
    assert calls["floor-subscribed"] == {"driver": 0, "runtime": 0, "resource": 0}
    for name in ("floor", "floor-v2", "floor-graphs", "floor+naming", "floor-recording"):
        assert calls[name] == {"driver": 6, "runtime": 0, "resource": 0}, name
    for label, _, _ in SPLIT_STEPS:
        assert f"| {label} |" in done.stdout


def test_a_block_after_kname_s_patches_changed_settles_before_its_timed_loop() -> None:
    """kname.enable() or disable() sets or restores its patches on the libraries' classes, and
    the interpreter's specialised instructions that read them miss until they specialise again:
    a block started after such a change (by its own start, or an earlier block's stop) runs the
    settling iterations untimed first; a block after none does not."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import profile_inprocess as harness

    ran: list[int] = []
    enabling = harness.Variant(
        "enabling", lambda: harness.set_enabled(True), lambda: harness.set_enabled(False)
    )
    still = harness.Variant("still", lambda: harness.set_enabled(False), lambda: None)
    harness.set_enabled(False)
    harness.TOGGLES[1] = harness.TOGGLES[0]  # settled, as after a block
    for variant in (still, enabling, still, still):
        harness.run_block(variant, ran.append, lambda: None, warm=3, iterations=20, settle=100)
    assert ran == [3, 20, 3, 100, 20, 3, 100, 20, 3, 20]


@pytest.mark.skipif(native is None, reason=f"no native CUPTI callback here: {WHY}")
@pytest.mark.skipif(COMPILER is None, reason="no C compiler for the stand-in libcupti")
def test_also_adds_the_variants_named_and_the_pieces_they_make(tmp_path) -> None:
    out = tmp_path / "also.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--noop", "--also", "kname-wrapped", "--rounds", "4",
         "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["phase_kname"]) == {"off-again", "floor", "kname", "kname-wrapped"}
    assert list(result["split"]) == ["the library launch wrappers kept in the call path"]
    assert result["wrappers_out"] == {"kname": True, "kname-wrapped": False}
