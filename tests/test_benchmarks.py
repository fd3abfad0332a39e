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
from hypothesis import given, settings
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
    assert "## First launch from a new line (cache miss)" in table
    for tool in ("none", "null"):
        for case in ("seen file", "new file"):
            assert any(line.startswith(f"| {tool} | {case} |") for line in table.splitlines())
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
    for miss in results["miss"]:  # each named launch of each case is a new site
        assert miss["new_sites"] == miss["seen_file"]["pairs"] + miss["new_file"]["pairs"]
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
         "--sites", "30", "--floor", "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert (result["merged_ranks"], result["merged_sites"]) == (40, 30)
    assert result["workers"] >= 1 and result["peak_megabytes"] > 0
    assert result["table_head"][0].startswith("kname profile (profile.rank*.json, written by")
    assert "40 ranks" in result["table_head"][0]
    assert result["parse_floor"]["workers"] >= 1  # json.loads alone, timed too
    assert result["cpus"] >= 1 and result["memory_gigabytes"] > 0  # the host, said


def test_the_rank_files_written_by_a_process_per_cpu_are_those_one_process_writes(
    tmp_path, monkeypatch
):
    spec = importlib.util.spec_from_file_location(
        "merge_ranks", REPO / "benchmarks" / "merge_ranks.py"
    )
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "merge_ranks", bench)  # its writer, sent to the processes
    spec.loader.exec_module(bench)
    (tmp_path / "one").mkdir()
    (tmp_path / "shared").mkdir()
    bench.write_ranks(tmp_path / "one", range(40), 40, 20)
    paths = bench.write_rank_files(tmp_path / "shared", 40, 20)  # a run of ranks per process
    assert [Path(path).name for path in paths] == [f"profile.rank{r}.json" for r in range(40)]
    for path in paths:
        assert Path(path).read_bytes() == (tmp_path / "one" / Path(path).name).read_bytes()


# --- kname profile on a whole program (benchmarks/profile_program.py) ----------------------


def test_the_whole_program_benchmark_says_in_one_line_that_it_needs_a_gpu(tmp_path):
    if COMMON.no_gpu() is None:
        pytest.skip("a GPU is here: the benchmark would run (run.py --only program runs it)")
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "profile_program.py"), "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"profile_program: skipped, {COMMON.no_gpu()}"]
    assert json.loads(out.read_text()) == {"skipped": COMMON.no_gpu()}
    done = subprocess.run(
        [sys.executable, str(RUN), "--only", "program", "--out", str(tmp_path / "out")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"[bench] program: skipped, {COMMON.no_gpu()}\n" in done.stderr
    assert f"skipped: {COMMON.no_gpu()}" in (tmp_path / "out" / "results.md").read_text()


def test_the_mixed_program_runs_each_line_as_user_code_and_says_what_it_skipped(tmp_path):
    """benchmarks/mixed_program.py on the CUDA simulator: numba-cuda's line runs (each other
    library's runs or is skipped with its reason), the lines it reports are those of the loop it
    wrote, timed together and apart, and their Python calls counted."""
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    env.update(NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO))
    args = ["--out", str(out), "--iterations", "2", "--warmup", "1", "--elements", "32"]
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "mixed_program.py"), *args, "--lines",
         "--count-calls"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    labels = [line["label"] for line in result["lines"]]
    assert "numba" in labels
    families = {label.split("-")[0] for label in labels}
    assert families | set(result["skipped"]) == {"numba", "cupy", "torch", "triton"}
    source = (tmp_path / "mixed_loop.py").read_text().splitlines()
    for line in result["lines"]:
        assert source[line["line"] - 1].strip() == source[line["timed_line"] - 1].strip()
    assert "nb_scale[" in source[result["lines"][labels.index("numba")]["line"] - 1]
    assert result["loop_ns"] > 0 and set(result["line_ns"]) == set(labels)
    assert result["python_calls"]["numba"] > 0  # the simulator runs the kernel in Python
    assert "launch_calls" not in result  # no kname profile collecting here


# --- its CPU side: options, and the table made from measured numbers -----------------------


def load_program_benchmark():
    """benchmarks/profile_program.py as a module (its imports found beside it, sys.path kept)."""
    kept = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_profile_program", REPO / "benchmarks" / "profile_program.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = kept
    return module


PROGRAM_BENCH = load_program_benchmark()


def test_the_whole_program_benchmark_options_default_and_refuse_what_is_not_above_zero():
    args = PROGRAM_BENCH.parse_args([])
    assert (args.rounds, args.iterations, args.max_seconds, args.table) == (5, 1500, 330.0, None)
    args = PROGRAM_BENCH.parse_args(["--rounds", "9", "--max-seconds", "500", "--breakdown"])
    assert (args.rounds, args.max_seconds, args.breakdown) == (9, 500.0, True)
    for option, value in [("--rounds", "0"), ("--iterations", "-3"), ("--max-seconds", "nan"),
                          ("--rounds", "two"), ("--warmup", "1.5")]:  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "profile_program.py"), option, value],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.splitlines()[-1].endswith(
            f"argument {option}: expected a number above 0, not {value!r}"
        )


# Per variant, µs a GPU launch adds in every round (the unprofiled run's is 0), in hundredths.
ADDED = st.integers(-500, 5_000).map(lambda hundredths: hundredths / 100)


@st.composite
def measured_runs(draw):
    """What measure() returns for a run whose variants each add a fixed time per launch."""
    bench = PROGRAM_BENCH
    rounds = draw(st.integers(1, 9))
    base = draw(st.lists(st.integers(10**6, 10**9), min_size=rounds, max_size=rounds))
    others = draw(st.lists(st.sampled_from(bench.VARIANTS[1:]), unique=True, min_size=1))
    variants = [v for v in bench.VARIANTS if v in (bench.BARE, *others)]  # as measure() keeps them
    added = {v: 0.0 if v == bench.BARE else draw(ADDED) for v in variants}
    per_iteration, iterations = draw(st.integers(1, 20)), draw(st.integers(1, 3000))
    launches = per_iteration * iterations
    loops = {v: [b + added[v] * launches * 1e3 for b in base] for v in variants}
    measured = {
        "loops": loops,
        "processes": {v: [2e9 + n for n in range(rounds)] for v in variants},
        "notes": draw(st.lists(st.sampled_from(["a note", "another"]), max_size=2)),
        "launches_per_iteration": float(per_iteration),
        "api_calls_per_iteration": draw(st.none() | st.floats(1, 40)),
        "iterations": iterations,
        "lines": [{"label": "numba", "line": 3, "timed_line": 9}],
        "skipped": draw(st.dictionaries(st.sampled_from(["torch", "triton"]), st.just("absent"))),
    }
    return measured, added


def table_rows(text: str) -> dict[str, list[str]]:
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header, rule, *body = [line.strip("| ").split(" | ") for line in lines]
    assert len(rule) == len(header) and set(rule) <= {"---", "---:"}
    assert all(len(row) == len(header) for row in body)
    return {row[0]: row[1:] for row in body}


@given(measured_runs())
def test_a_variant_that_adds_the_same_time_every_round_reads_it_at_both_quartiles(run):
    """Every variant measured has a row, in the benchmark's order; the added time per launch
    (lower quartile, median) of a variant is the time it added; the A/A row is the host's."""
    measured, added = run
    rows = PROGRAM_BENCH.summary(measured)
    text = PROGRAM_BENCH.render(measured, rows, "python benchmarks/profile_program.py")
    table = table_rows(text)
    assert list(table) == [v for v in PROGRAM_BENCH.VARIANTS if v in added]
    for variant, cells in table.items():
        expected = "—" if variant == PROGRAM_BENCH.BARE else f"{added[variant]:+.2f} µs"
        assert cells[:2] == [expected, expected]
    assert all(f"- note: {note}" in text for note in measured["notes"])
    assert all(f"- skipped: {lib}" in text for lib in measured["skipped"])
    assert f"{measured['iterations']} iterations" in text


@given(measured_runs())
def test_the_facts_under_the_table_are_differences_of_the_variants_added_times(run):
    measured, added = run
    bench = PROGRAM_BENCH
    text = bench.render(measured, bench.summary(measured), "cmd")
    facts = [
        ("kname --json above CUPTI's floor", bench.JSON, bench.FLOOR),
        ("--trace over --json alone", bench.TRACE, bench.JSON),
        ("Proton above CUPTI's floor", bench.PROTON, bench.FLOOR),
    ]
    for label, variant, base in facts:
        if variant in added and base in added:
            assert f"{label}: {added[variant] - added[base]:+.2f} µs per launch" in text
        else:
            assert label not in text
    kname, proton = added.get(bench.JSON), added.get(bench.PROTON)
    if kname is not None and proton:
        assert f"kname's added time is {kname / proton:.0%} of Proton's" in text


@settings(max_examples=5, deadline=None)
@given(measured_runs())
def test_a_saved_run_prints_the_same_table_again_without_a_gpu(tmp_path_factory, run):
    measured, _ = run
    bench = PROGRAM_BENCH
    command = "python benchmarks/profile_program.py --rounds 3"
    text = bench.render(measured, bench.summary(measured), command)
    saved = tmp_path_factory.mktemp("saved") / "program.json"
    saved.write_text(json.dumps({"measured": measured, "markdown": text, "command": command}))
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "profile_program.py"), "--table", str(saved)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == text


def test_the_cpu_profile_benchmark_runs_without_a_gpu_and_prints_a_row_per_variant(tmp_path):
    """benchmarks/profile_cpu.py with CUPTI played by the stand-in: kname's own part of the
    cost per launch, or one line saying what this machine lacks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "profile_cpu.py"), "--rounds", "2",
         "--batch", "20"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if done.stdout.startswith("profile_cpu: skipped, "):
        assert len(done.stdout.splitlines()) == 1
        return
    rows = [line.split(" | ")[0] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows == ["| variant", "| ---", "| kname", "| --json", "| --trace"]
    assert "2 rounds; the launch wrapper: " in done.stdout


def test_the_in_process_benchmark_runs_its_harness_on_the_cpu_with_an_a_a_pair(tmp_path):
    """--noop: the harness alone (the no-op target, kname toggled in blocks): every round has
    each variant once, and the table gives the A/A pair beside kname."""
    out = tmp_path / "result.json"
    script = REPO / "benchmarks" / "profile_inprocess.py"
    done = subprocess.run(
        [sys.executable, str(script), "--noop", "--rounds", "30", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    rows = result["phase_kname"]
    assert set(rows) == {"off-again", "kname"}
    assert {row["rounds"] for row in rows.values()} == {30}
    for row in rows.values():
        for clock in ("cpu", "wall"):
            assert row[clock]["low_us"] <= row[clock]["added_us"] <= row[clock]["high_us"]
    assert "| kname | off-again | 30 |" in done.stdout and "| kname | kname | 30 |" in done.stdout


@given(st.lists(st.floats(-50, 50), min_size=1, max_size=200))
def test_the_median_lies_within_its_interval_and_the_interval_within_the_values(values):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import profile_inprocess

    median, low, high = profile_inprocess.median_interval(values)
    assert min(values) <= low <= median <= high <= max(values)
