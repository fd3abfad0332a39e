"""benchmarks/gpu_memory.py (what --memory costs on a torch training step): its summary, and its
one line without a GPU. The runs themselves need a GPU (the batches run them)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO

PATH = REPO / "benchmarks" / "gpu_memory.py"
sys.path.insert(0, str(PATH.parent))
SPEC = importlib.util.spec_from_file_location("gpu_memory", PATH)
gpu_memory = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_memory)


def test_without_a_gpu_it_says_so_in_one_line(tmp_path):
    reason = gpu_memory.no_gpu()
    if reason is None:
        pytest.skip("a GPU is here: the benchmark would run")
    done = subprocess.run(
        [sys.executable, str(PATH)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"gpu_memory: skipped: {reason}"]


def run(step: float, round_number: int) -> dict[str, float]:
    return {"STEP": step, "ALLOCS": 40.0, "ALLOC": 5000.0, "WALL": 1.0, "round": round_number}


@given(
    st.dictionaries(st.integers(0, 5), st.floats(1.0, 10.0), min_size=1),
    st.dictionaries(st.integers(0, 5), st.floats(0.0, 5.0), min_size=1),
)
def test_a_variants_ratio_and_added_time_are_against_profile_of_its_own_round_only(base, added):
    runs = {
        "profile": [run(step, r) for r, step in base.items()],
        "memory": [run(base.get(r, 1.0) + extra, r) for r, extra in added.items()],
    }
    rows = gpu_memory.summary(runs)
    paired = [r for r in added if r in base]
    if not paired:
        assert "ratio" not in rows["memory"]
        return
    ratios = sorted((base[r] + added[r]) / base[r] for r in paired)
    assert ratios[0] - 1e-9 <= rows["memory"]["ratio"] <= ratios[-1] + 1e-9
    extra = sorted(added[r] for r in paired)
    per_block = rows["memory"]["added_us_per_block"]
    assert 1000 * extra[0] / 40 - 1e-6 <= per_block <= 1000 * extra[-1] / 40 + 1e-6
