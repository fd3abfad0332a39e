"""The benchmark harness still runs: its smallest suite, in a subprocess, as a user runs it.

Nothing here checks a timing (speed lives in benchmarks/); only that the harness ends well, that
its table has every row, and that kname's variant named its launches.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, copy_checkout, make_venv

RUN = REPO / "benchmarks" / "run.py"


def load_common():
    """benchmarks/_common.py (standard library only at import), as the workers import it."""
    spec = importlib.util.spec_from_file_location(
        "bench_common", REPO / "benchmarks" / "_common.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMON = load_common()
VARIANTS = (
    "bare launch (kname uninstalled)",
    "kname on, cached call site",
    "the same, pure-Python wrapper (KNAME_NATIVE=0)",
    "kname installed, kname.disable()d",
    "static NVTX range, prebuilt push_range/pop_range",
    "bare launch again (A/A control: the method's noise)",
)


def test_quick_launch_suite_runs_to_the_end_and_prints_its_table(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--only", "launch", "--out", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert "## Per launch (CPU)" in table
    assert "## First launch from a new call site (cache miss)" in table
    results = json.loads((tmp_path / "results.json").read_text())
    tools = list(dict.fromkeys(run["tool"] for run in results["launch"]))
    # The null tool is built as the tests build theirs; where it cannot be, a note says so.
    unavailable = [n for n in results["notes"] if n.startswith("NVTX null tool unavailable")]
    assert results["notes"] == unavailable  # no worker error, warning or unnamed launch
    assert tools == (["none"] if unavailable else ["none", "null"])
    assert [(run["workload"], run["tool"]) for run in results["launch"]] == [
        (workload, tool) for tool in tools for workload in ("noop", "noop_step")
    ]
    for run in results["launch"]:
        label = {"noop": "no-op target (CPU)"}.get(
            run["workload"], "no-op target, from a function called per launch (CPU)"
        )
        for variant in VARIANTS:
            assert f"| {label} | {run['tool']} | {variant} |" in table
        assert run["tool_attached"] is (run["tool"] == "null")
        # kname's variant named its launches: every count is of the one launching line.
        where = {"noop": "bench_loops_noop.py", "noop_step": "bench_step_noop.py"}[run["workload"]]
        assert run["site_names"] and all(where in n for n in run["site_names"])
    assert [m["new_sites"] for m in results["miss"]] == [m["pairs"] for m in results["miss"]]
    assert (tmp_path / "results.md").read_text().strip() == table.strip()


def test_the_profile_cost_benchmark_says_in_one_line_that_it_needs_a_gpu(tmp_path):
    """benchmarks/profile_cost.py (its graph-100 workload included) runs only on a GPU: without
    one it says why in one line and ends well."""
    if COMMON.no_gpu() is None:
        pytest.skip("a GPU is here: the benchmark would run (tests/gpu runs it)")
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "profile_cost.py"), "--only", "graph-100"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"profile_cost: skipped, {COMMON.no_gpu()}"]


# A venv as the README's first command makes (`pip install ".[auto]"`): no wheel package, or,
# on Python 3.12+, not even setuptools. (make_venv's venv sees the test environment's packages:
# a .pth hides the ones such a venv lacks.)
MISSING = {
    "wheel": "needs wheel in this Python: {python} -m pip install wheel",
    "setuptools": "needs setuptools>=64 wheel in this Python: {python} -m pip install "
    "'setuptools>=64' wheel",
}


@pytest.mark.slow
@pytest.mark.parametrize("lacking", list(MISSING))
def test_a_fresh_checkout_benchmarks_its_c_hot_path_or_says_in_one_line_what_is_missing(
    tmp_path: Path, lacking: str
) -> None:
    checkout = copy_checkout(tmp_path / "checkout")  # as cloned: no extension built in it
    venv = make_venv(tmp_path / "venv")
    (venv.site_packages / "zz_lacking.pth").write_text(
        f"import sys; sys.modules[{lacking!r}] = None\n"
    )
    done = venv.python_run(
        str(checkout / "benchmarks" / "run.py"), "--quick", "--only", "launch,startup",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    skipped = results["startup"]["skipped"]
    assert skipped.endswith(MISSING[lacking].format(python=venv.python)), skipped
    assert f"[bench] startup: skipped, {skipped}\n" in done.stderr
    notes = [n for n in results["notes"] if not n.startswith("NVTX null tool unavailable")]
    hot_paths = {run["hot_path"] for run in results["launch"]}
    if lacking == "wheel":  # setuptools builds the extensions into the checkout, as tests do
        assert (notes, hot_paths) == ([], {"C extension"})
    else:
        assert notes == [
            "kname's C extensions, built into this checkout (the kname benchmarked): setuptools "
            f"is not installed for {venv.python}: pip install setuptools"
        ]
        assert all(path.startswith("pure Python") for path in hot_paths)


@given(items=st.lists(st.integers(), unique=True, max_size=8), rounds=st.integers(0, 30))
def test_each_round_times_every_variant_once(items, rounds):
    orders = list(COMMON.round_orders(items, rounds, seed=rounds))
    assert len(orders) == rounds
    assert all(sorted(order) == sorted(items) for order in orders)
    assert orders == list(COMMON.round_orders(items, rounds, seed=rounds))  # repeatable


def test_no_variant_always_follows_the_same_one():
    """Over a run's rounds each variant is timed right after every other one, not only after its
    neighbour in a fixed (or rotated) order."""
    variants = ["bare", "kname", "python", "disabled", "static", "again", "object"]
    followed = set()
    for order in COMMON.round_orders(variants, 200):
        followed.update(itertools.pairwise(order))
    assert followed == set(itertools.permutations(variants, 2))


def test_the_rank_merge_benchmark_merges_every_rank_file(tmp_path) -> None:
    out = tmp_path / "ranks.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "merge_ranks.py"), "--ranks", "40",
         "--sites", "30", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert (result["merged_ranks"], result["merged_sites"]) == (40, 30)
    assert result["workers"] >= 1 and result["peak_megabytes"] > 0
    assert result["table_head"][0].startswith("kname profile (profile.rank*.json, written by")
    assert "40 ranks" in result["table_head"][0]
