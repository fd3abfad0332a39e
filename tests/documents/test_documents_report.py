"""`kname report` on censuses, GPU profiles and several files: tables, merges, diffs, exit codes,
and the values of its options.

The command is run in-process (kname.cli.main) on files written by kname's own writers; the
merge and diff rules themselves are tested over generated documents in test_documents_build.py
and test_documents_diff.py, and the installed `kname report` command in test_cli.py.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO
from support.html_pages import ParsedPage, assert_no_injected_markup
from support.profile_streams import census_of

from kname.cli import main
from kname.documents.build import profile_document
from kname.documents.merge import merge_documents
from kname.documents.pytest_report import render_pytest_report
from kname.documents.report import parse_duration, parse_threshold
from kname.documents.schema import render_json
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.pytest_plugin import write_report
from kname.ranks import Rank, meta


def profile(**sites: tuple[str, int, int]) -> dict:
    """A profile of {name: (kernel, launches, gpu_ns)}; names use `_` for spaces, `__` for `:`."""
    totals = {}
    for rank, (key, (kernel, launches, gpu_ns)) in enumerate(sites.items(), 1):
        name = key.replace("__", ":").replace("_", " ").replace(" py", ".py")
        totals[name] = SiteTotals(launches, gpu_ns, rank, {kernel: KernelTotals(launches, gpu_ns)})
    return profile_document(Profile(totals, SiteTotals()))


def census(**sites: int) -> dict:
    total = sum(sites.values())
    rows = [
        {"name": name.replace("__", ":").replace("_", " ").replace(" py", ".py"),
         "kernel": "axpy", "lib": "numba", "launches": n, "share": round(n / total, 6),
         "order": rank}
        for rank, (name, n) in enumerate(sites.items(), 1)
    ]  # fmt: skip
    return {"kname": "0.1.0", "schema": 1, "sites": rows, "total_launches": total}


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Write documents into tmp_path (the working directory) and return their names."""
    monkeypatch.chdir(tmp_path)

    def write(**documents: dict) -> list[str]:
        for name, document in documents.items():
            (tmp_path / f"{name}.json").write_text(render_json(document))
        return [f"{name}.json" for name in documents]

    return write


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


OLD = profile(step_app_py__12=("axpy", 20, 2_000_000), main_app_py__30=("_Z5scalePf", 5, 500_000))
SLOWER = profile(
    step_app_py__12=("axpy", 20, 2_600_000), main_app_py__30=("_Z5scalePf", 6, 510_000)
)


def test_a_profile_is_a_table_ranked_by_gpu_time(files, capsys) -> None:
    files(p=OLD)
    code, out, err = run(capsys, "p.json", "--top", "1")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("kname profile (p.json, written by kname ")
    assert lines[0].endswith("2.50 ms of GPU time in 25 launches from 2 call sites")
    assert lines[2].split()[:4] == ["step", "app.py:12", "2.00", "ms"]
    assert lines[3] == "... and 1 more call site: 500 us (20.0%)"


def test_several_profiles_are_one_table_of_their_sites_summed(files, capsys) -> None:
    files(r0=OLD, r1=SLOWER)
    code, out, _ = run(capsys, "r0.json", "r1.json")
    assert code == 0
    assert "(r0.json + r1.json, written by kname" in out and ", 2 processes)" in out
    assert out.splitlines()[0].endswith("5.61 ms of GPU time in 51 launches from 2 call sites")
    assert "axpy 4.60 ms (40)" in out


def test_several_launch_censuses_are_one_census_of_their_sites_summed(files, capsys) -> None:
    files(c0=census(step_app_py__12=3), c1=census(step_app_py__12=2, main_app_py__30=1))
    code, out, _ = run(capsys, "c0.json", "c1.json")
    assert code == 0
    assert out.splitlines()[0].endswith(": 6 launches from 2 call sites")
    assert out.splitlines()[2].split()[:5] == ["step", "app.py:12", "axpy", "numba", "5"]


def test_one_launch_census_is_the_census_report_as_before(files, capsys) -> None:
    files(c=census(step_app_py__12=3))
    code, out, _ = run(capsys, "c.json")
    assert code == 0 and out.startswith("kname census (c.json, written by kname 0.1.0): 3 ")


def test_a_diff_shows_gpu_time_and_launches_and_fails_only_when_asked(files, capsys) -> None:
    files(old=OLD, new=SLOWER)
    code, out, err = run(capsys, "old.json", "--diff", "new.json")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        "kname profile diff: old.json (2.50 ms) -> new.json (3.11 ms), threshold 10% and 50.0 us:"
        " 1 slower"
    )
    assert lines[2].split()[:3] == ["slower", "step", "app.py:12"] and "(+30.0%)" in lines[2]
    assert lines[3].endswith(": 1 change") and lines[4].split() == [
        "main", "app.py:30", "[scale]", "5", "->", "6",
    ]  # fmt: skip
    code, _, err = run(capsys, "old.json", "--diff", "new.json", "--fail-on-slower", "10%")
    assert code == 1
    assert err == (
        "kname report: 1 call site and the total got slower by more than 10% and 50.0 us "
        "(--fail-on-slower)\n"
    )


def test_the_threshold_and_the_minimum_time_decide_what_is_slower(files, capsys) -> None:
    files(old=OLD, new=SLOWER)
    assert run(capsys, "old.json", "--diff", "new.json", "--fail-on-slower", "40")[0] == 0
    slower_by_30 = ["old.json", "--diff", "new.json", "--fail-on-slower", "25%"]
    assert run(capsys, *slower_by_30)[0] == 1
    assert run(capsys, *slower_by_30, "--min-time", "1ms")[0] == 0  # grew 600 us: too little


def test_a_faster_profile_does_not_fail(files, capsys) -> None:
    files(old=OLD, new=SLOWER)
    code, out, _ = run(capsys, "new.json", "--diff", "old.json", "--fail-on-slower", "10%")
    assert code == 0 and "faster" in out


def test_fail_on_change_compares_launches_per_site_and_kernel(files, capsys) -> None:
    files(old=OLD, new=SLOWER, same=OLD)
    assert run(capsys, "old.json", "--diff", "new.json", "--fail-on-change")[0] == 1
    assert run(capsys, "old.json", "--diff", "same.json", "--fail-on-change")[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["p.json", "--fail-on-slower", "10%"], "--fail-on-slower needs --diff OTHER.json"),
        (["p.json", "--min-time", "1ms"], "--min-time needs --diff OTHER.json"),
        (["p.json", "--diff", "p.json", "--fail-on-slower", "ten"], "expected a percentage"),
        (["p.json", "--diff", "p.json", "--min-time", "5"], "expected a duration such as 50us"),
        (["p.json", "--top", "0"], "--top 0: expected a whole number of 1 or more"),
        (["p.json", "c.json"], "cannot merge launch censuses (schema 1) with GPU profiles"),
        (["c.json", "--diff", "p.json"], "cannot merge or compare launch censuses (schema 1)"),
        (["c.json", "--top", "3"], "--top is for GPU profiles (schema 2), not launch censuses"),
        (["c.json", "--diff", "c.json", "--fail-on-slower", "5"], "--fail-on-slower is for GPU"),
        (["p.json", "missing.json"], "missing.json: no such file"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(files, capsys, args, message) -> None:
    files(p=OLD, c=census(step_app_py__12=3))
    code, out, err = run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("kname report: ") and message in err, err


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, '{"schema": 2, "sites": [], "n": ' + "9" * 5000 + "}"]
)
def test_hostile_files_are_one_line_too(files, capsys, tmp_path, text) -> None:
    (tmp_path / "bad.json").write_text(text)
    files(p=OLD)
    code, out, err = run(capsys, "p.json", "bad.json")
    assert (code, out) == (2, "")
    assert err.startswith("kname report: bad.json: ") and err.count("\n") == 1, err[:300]


# --- the values of its options --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"), [("10%", 0.1), ("10", 0.1), (" 2.5 % ", 0.025), ("0", 0.0), ("0%", 0.0)]
)
def test_thresholds_are_percentages(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "ten", "-5%", "nan", "inf%", "10%%"])
def test_a_bad_threshold_says_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"--fail-on-slower .*: expected a percentage"):
        parse_threshold(text)


@pytest.mark.parametrize(
    ("text", "ns"),
    [("50us", 50_000), ("50 µs", 50_000), ("2ms", 2_000_000), ("1.5s", 1_500_000_000),
     ("200ns", 200), ("0", 0), (".5ms", 500_000)],
)  # fmt: skip
def test_durations_have_units(text, ns):
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["50", "5x", "-1ms", "ms", ""])
def test_a_bad_duration_says_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"--min-time .*: expected a duration such as 50us"):
        parse_duration(text)


# --- what is given: nothing, a file twice, a pattern that matched nothing -------------------


def test_no_file_is_one_line_saying_what_report_takes(files, capsys) -> None:
    code, out, err = run(capsys)
    assert (code, out) == (2, "")
    assert err == "kname report: needs a saved census or profile, e.g. kname report census.json\n"


def test_a_file_given_twice_is_counted_once_and_said(files, capsys) -> None:
    files(c=census(step_app_py__12=3))
    for twice in (["c.json", "c.json"], ["c.json", "./c.json"]):
        code, out, err = run(capsys, *twice)
        assert code == 0
        assert out.startswith("kname census (c.json, written by kname 0.1.0): 3 launches ")
        assert err == (f"kname report: {twice[1]} is given more than once; it is counted once\n")


def test_a_pattern_that_matched_no_file_is_left_out_in_one_line(files, capsys) -> None:
    files(c=census(step_app_py__12=3), d=census(step_app_py__12=4))
    code, out, err = run(capsys, "c.json", "c.pid*.json")
    assert code == 0
    assert out.startswith("kname census (c.json, written by kname 0.1.0): 3 launches ")
    assert err == "kname report: c.pid*.json: a pattern that matched no file; left out\n"
    code, out, err = run(capsys, "c.json", "c.pid*.json", "--diff", "d.json")
    assert code == 0 and out.startswith("kname census diff: c.json (3 launches) -> d.json")
    assert err == "kname report: c.pid*.json: a pattern that matched no file; left out\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["c.pid*.json"], "c.pid*.json: a pattern that matched no file, and no file was given"),
        (["c.json", "--diff", "d?.json"], "d?.json: a pattern that matched no file"),
    ],
)
def test_a_pattern_that_leaves_nothing_to_read_is_one_line_and_exit_2(
    files, capsys, args, message
) -> None:
    files(c=census(step_app_py__12=3))
    code, out, err = run(capsys, *args)
    assert (code, out) == (2, "")
    assert err == f"kname report: {message}\n"


def test_a_file_named_like_a_pattern_is_read(files, tmp_path, capsys) -> None:
    files(c=census(step_app_py__12=3))
    (tmp_path / "c.json").rename(tmp_path / "c[1].json")
    code, out, err = run(capsys, "c[1].json")
    assert (code, err) == (0, "")
    assert out.startswith("kname census (c[1].json, written by kname 0.1.0): 3 launches ")


# --- what is read: saved files only ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_anything_but_a_regular_file_is_one_line_and_never_waits(tmp_path, kind) -> None:
    """A FIFO nobody writes used to hang `kname report`; each special file is one line, exit 2.

    In a subprocess with a time limit: a read that waits is a failure, not a stuck suite.
    """
    paths = {"fifo": tmp_path / "census.json", "directory": tmp_path, "device": "/dev/null"}
    if kind == "fifo":
        os.mkfifo(paths["fifo"])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "kname", "report", str(paths[kind])],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    what = {"fifo": "a FIFO", "directory": "a directory", "device": "a character device"}[kind]
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (
        f"kname report: {paths[kind]}: it is {what}, not a saved file kname can read\n"
    )


# --- the pytest plugin's report (pytest --kname-report) ----------------------------------------


def suite_report(path, **tests: dict) -> str:
    """Write a report as `pytest --kname-report` does, of {test name: its census}."""
    entries = {f"test_app.py::{name}": {"outcome": "passed", **c} for name, c in tests.items()}
    write_report(str(path), entries)
    return path.name


def test_a_pytest_report_is_one_census_of_every_tests_sites_summed(files, tmp_path, capsys):
    name = suite_report(
        tmp_path / "tests.json",
        test_a=census(step_app_py__12=3, main_app_py__30=1),
        test_b=census(step_app_py__12=4),
        test_quiet=census(),
    )
    code, out, err = run(capsys, name)
    assert (code, err) == (0, "")
    files(expected=census(step_app_py__12=7, main_app_py__30=1))
    assert out == run(capsys, "expected.json")[1].replace("expected.json", name)
    # Two runs of a suite compare as two censuses; a census and a suite's report merge.
    later = suite_report(tmp_path / "later.json", test_a=census(step_app_py__12=5))
    code, out, err = run(capsys, name, "--diff", later)
    assert (code, err) == (0, "")
    assert out.startswith(f"kname census diff: {name} (8 launches) -> {later} (5 launches): ")
    code, out, err = run(capsys, name, later)
    assert (code, err) == (0, "")
    assert "13 launches from 2 call sites" in out.splitlines()[0]


def test_a_broken_pytest_report_is_one_line(files, tmp_path, capsys) -> None:
    (tmp_path / "tests.json").write_text('{"report": "pytest", "schema": 1, "tests": {"t": 3}}')
    code, out, err = run(capsys, "tests.json")
    assert (code, out) == (2, "")
    assert err == (
        "kname report: tests.json: test 't' must be an object with 'sites' and "
        "'total_launches', not a number\n"
    )


# --- a job's rank files -------------------------------------------------------------------------


def rank_file(rank: int, world: int = 4, **sites: tuple[str, int, int]) -> dict:
    """A profile as rank `rank` of a job of `world` writes it."""
    return {**profile(**sites), "ranks": [meta(Rank(rank, rank, world, "torchrun"), pid=rank)]}


@pytest.fixture
def job(files):
    """profile.rank0.json to profile.rank3.json: `step` runs twice as long on rank 2; `save`
    runs on rank 0 alone."""
    ranks = {}
    for rank in range(4):
        step = ("axpy", 20, 1_600_000 if rank == 2 else 800_000 + 10_000 * rank)
        reduce = ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10, 300_000 + 1_000 * rank)
        save = {"save_app_py__40": ("[memcpy DtoH]", 1, 90_000)} if rank == 0 else {}
        document = rank_file(rank, step_app_py__12=step, reduce_app_py__30=reduce, **save)
        ranks[f"profile.rank{rank}"] = document
    return files(**ranks)


def test_a_jobs_rank_files_are_one_table_with_each_sites_spread(job, capsys) -> None:
    code, out, err = run(capsys, *job)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("kname profile (profile.rank0.json + 3 more files, written by ")
    assert ", 4 ranks): 5.34 ms of GPU time in 121 launches from 3 call sites" in lines[0]
    assert lines[1].split()[7:] == ["rank", "min", "median", "max", "slowest", "kernels"]
    assert lines[2].split()[:17] == [
        "step", "app.py:12", "4.04", "ms", "75.7%", "80", "50.5", "us",
        "800", "us", "820", "us", "1.60", "ms", "rank", "2", "(+95%)",
    ]  # fmt: skip
    assert lines[4].split()[:2] == ["save", "app.py:40"] and "rank 0 (median 0)" in lines[4]


def test_by_rank_shows_each_sites_row_on_each_rank(job, capsys) -> None:
    code, out, _ = run(capsys, *job, "--by-rank", "--top", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == ["call", "site", "rank", "GPU", "time", "launches", "mean", "vs",
                                "median"]  # fmt: skip
    assert [line.split()[-7:] for line in lines[2:]] == [
        ["0", "800", "us", "20", "40.0", "us", "-2.4%"],
        ["1", "810", "us", "20", "40.5", "us", "-1.2%"],
        ["2", "1.60", "ms", "20", "80.0", "us", "+95.1%"],
        ["3", "830", "us", "20", "41.5", "us", "+1.2%"],
    ]
    assert lines[2].startswith("step app.py:12") and lines[3].startswith(" ")


@pytest.mark.parametrize(
    ("threshold", "minimum", "flagged"),
    [("20%", None, ["step app.py:12", "save app.py:40"]), ("150", None, ["save app.py:40"]),
     ("20%", "100us", ["step app.py:12"]), ("20%", "1ms", [])],
)  # fmt: skip
def test_a_straggler_is_a_rank_over_the_median_by_the_threshold_and_the_minimum_time(
    job, capsys, threshold, minimum, flagged
) -> None:
    extra = ["--min-time", minimum] if minimum else []
    code, out, err = run(capsys, *job, "--straggler", threshold, *extra)
    assert code == 0
    marked = [line for line in out.splitlines() if "! rank" in line]
    assert [" ".join(line.split()[:2]) for line in marked] == flagged
    if flagged:
        assert err.startswith(f"kname report: {len(flagged)} call site")
        assert "with a straggler: the slowest rank over the median by more than" in err
    else:
        assert err == ""


def test_fail_on_straggler_fails_a_ci_job_only_for_a_straggler(job, files, capsys) -> None:
    code, _, err = run(capsys, *job, "--fail-on-straggler", "--min-time", "100us")
    assert code == 1  # 20% unless --straggler says otherwise
    assert "(--fail-on-straggler): step app.py:12 (rank 2)" in err
    balanced = [f"profile.rank{rank}.json" for rank in (0, 1, 3)]
    assert run(capsys, *balanced, "--fail-on-straggler", "--min-time", "100us")[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--by-rank"], "--by-rank needs files of several ranks"),
        (["--straggler", "20%"], "--straggler needs files of several ranks"),
        (["--straggler", "much"], "--straggler 'much': expected a percentage"),
        (["--diff", "p.json", "--by-rank"], "--by-rank is for files of several ranks, not --diff"),
        (["--min-time", "1ms"], "--min-time needs --diff OTHER.json or --straggler PCT"),
    ],
)
def test_rank_options_used_wrongly_are_one_line_and_exit_2(files, capsys, args, message) -> None:
    files(p=OLD)
    code, out, err = run(capsys, "p.json", *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"kname report: {message}") and err.count("\n") == 1


def census_job(files, launches: list[int]) -> list[str]:
    """census.rank0.json ...: `step` launched launches[r] times on rank r, `main` once on each."""
    ranks = {}
    for rank, count in enumerate(launches):
        document = census(step_app_py__12=count, main_app_py__30=1)
        record = meta(Rank(rank, rank, len(launches), "slurm"), pid=rank)
        ranks[f"census.rank{rank}"] = {**document, "ranks": [record]}
    return files(**ranks)


def test_a_straggler_among_the_ranks_of_a_census_is_one_with_more_launches(files, capsys) -> None:
    """A census has launches, not time: the rule is on launches alone, with no --min-time."""
    job = census_job(files, [3, 3, 3, 9])
    code, out, err = run(capsys, *job, "--straggler", "20%", "--fail-on-straggler")
    assert code == 1
    marked = [line for line in out.splitlines() if "! rank" in line]
    assert [" ".join(line.split()[:2]) for line in marked] == ["step app.py:12"]
    assert marked[0].endswith("! rank 3 (+200%)")
    assert err == (
        "kname report: 1 call site with a straggler: the slowest rank over the median in "
        "launches by more than 20% (--fail-on-straggler): step app.py:12 (rank 3)\n"
    )
    assert run(capsys, *job, "--straggler", "200%", "--fail-on-straggler")[0] == 0
    code, _, err = run(capsys, *job, "--straggler", "20%", "--min-time", "1ms")
    assert code == 2 and "--min-time is for GPU profiles (schema 2)" in err


def test_the_slowest_of_ranks_that_all_launched_alike_is_none_of_them_all_equal(
    files, capsys
) -> None:
    code, out, _ = run(capsys, *census_job(files, [3, 3, 3, 9]))
    assert code == 0
    (main_row,) = [line for line in out.splitlines() if line.startswith("main app.py:30")]
    assert main_row.split()[-5:] == ["1", "1.0", "1", "all", "equal"]


# --- --html ---------------------------------------------------------------------------------


def sites_on_page(path) -> dict[str, str]:
    """{site: its link} of the first view of a page written by --html."""
    page = ParsedPage(path.read_text(encoding="utf-8"))
    first = page.views[0]
    return {row.attributes["data-site"]: row.links[0] for row in page.sites(first)}


@pytest.mark.parametrize(
    ("documents", "args"),
    [
        ({"p": OLD}, ["p.json"]),
        ({"c": census(step_app_py__12=3, main_app_py__30=1)}, ["c.json"]),
        ({"r0": OLD, "r1": SLOWER}, ["r0.json", "r1.json"]),
    ],
)
def test_html_writes_the_page_beside_the_same_table(files, capsys, tmp_path, documents, args):
    files(**documents)
    code, table, err = run(capsys, *args)
    assert run(capsys, *args, "--html", "page.html") == (code, table, err) == (0, table, "")
    assert sites_on_page(tmp_path / "page.html") == {
        "step app.py:12": "#f1-L12",
        "main app.py:30": "#f1-L30",
    }


def test_html_of_merged_files_shows_the_source_each_kept(files, capsys, tmp_path):
    kept = {"app.py": [{"first": 12, "lines": ["step()"]}]}
    files(r0=OLD | {"sources": kept}, r1=SLOWER)
    assert run(capsys, "r0.json", "r1.json", "--html", "page.html")[0] == 0
    rows = ParsedPage((tmp_path / "page.html").read_text()).lines("f1")
    assert rows[12].cells[3][1] == "step()" and rows[30].cells[3][1] == ""


def test_html_with_diff_writes_the_diff_page_and_keeps_the_exit_code(files, capsys, tmp_path):
    files(old=OLD, new=SLOWER)
    args = ["old.json", "--diff", "new.json", "--fail-on-slower", "10%"]
    code, out, _ = run(capsys, *args)
    assert run(capsys, *args, "--html", "diff.html")[:2] == (code, out) == (1, out)
    page = ParsedPage((tmp_path / "diff.html").read_text())
    assert {
        r.attributes["data-site"]: r.attributes["data-change"] for r in page.sites("changes")
    } == {
        "step app.py:12": "up",
        "main app.py:30": "same",
    }


def test_html_with_a_census_diff_writes_its_page(files, capsys, tmp_path):
    files(old=census(step_app_py__12=3), new=census(step_app_py__12=5, main_app_py__30=1))
    assert run(capsys, "old.json", "--diff", "new.json", "--html", "diff.html")[0] == 0
    page = ParsedPage((tmp_path / "diff.html").read_text())
    assert {r.attributes["data-site"]: r.cells[0][1] for r in page.sites("changes")} == {
        "step app.py:12": "changed",
        "main app.py:30": "added",
    }


def test_the_census_diff_page_ignores_lines_as_the_text_does(files, capsys, tmp_path):
    files(a=census(step_app_py__12=3), b=census(step_app_py__14=3))
    code, out, _ = run(capsys, "a.json", "--diff", "b.json", "--ignore-lines", "--html", "p.html")
    assert code == 0 and "no change in launches per call site (lines ignored)" in out
    page = ParsedPage((tmp_path / "p.html").read_text())
    assert {r.attributes["data-change"] for r in page.sites("changes")} == {"same"}
    assert (
        "no change in launches per call site (lines ignored)" in (tmp_path / "p.html").read_text()
    )


def summary_of(text: str) -> str:
    """`1 slower, 2 added`: the counts after the last `: ` of a text diff's first line."""
    return text.split("\n", 1)[0].rsplit(": ", 1)[1]


@pytest.mark.parametrize(
    ("old", "new", "options"),
    [
        (census(a_app_py__1=3, b_app_py__2=5, c_app_py__3=1),
         census(a_app_py__1=4, b_app_py__2=2, d_app_py__4=1), []),
        (census(a_app_py__1=3, b_app_py__2=5), census(a_app_py__7=3, b_app_py__2=6),
         ["--ignore-lines"]),
        (OLD, SLOWER, []),
        (OLD, SLOWER, ["--min-time", "1ms"]),
        (profile(step_app_py__12=("axpy", 20, 2_000_000), gone_app_py__1=("k", 1, 100_000)),
         profile(step_app_py__12=("axpy", 20, 1_000_000), new_app_py__2=("k", 1, 100_000)),
         ["--fail-on-slower", "5%"]),
    ],
)  # fmt: skip
def test_the_page_counts_the_changes_the_text_counts_in_its_words(
    files, capsys, tmp_path, old, new, options
):
    files(old=old, new=new)
    _, out, _ = run(capsys, "old.json", "--diff", "new.json", *options, "--html", "p.html")
    page = (tmp_path / "p.html").read_text()
    counted = summary_of(out)
    assert counted and f": {counted}" in page.replace("-&gt;", "->")
    words = {r.cells[0][1] for r in ParsedPage(page).sites("changes")} - {"same"}
    assert words <= {word for part in counted.split(", ") for word in part.split()[1:]}


@pytest.mark.parametrize("where", ["missing/page.html", "."])
def test_an_unwritable_html_path_is_one_line_and_exit_2(files, capsys, where):
    files(p=OLD)
    code, out, err = run(capsys, "p.json", "--html", where)
    assert code == 2 and out.startswith("kname profile")
    assert (
        err.startswith(f"kname report: --html {where}: cannot write it (") and err.count("\n") == 1
    )


def test_html_of_a_jobs_rank_files_shows_each_ranks_source_and_the_spread(job, capsys, tmp_path):
    for rank, path in enumerate(job):  # each rank kept the source of the lines it ran
        document = json.loads((tmp_path / path).read_text())
        kept = {"app.py": [{"first": 12, "lines": ["step()"]}]} if rank == 0 else {}
        kept |= {"app.py": [{"first": 40, "lines": ["save()"]}]} if rank == 3 else {}
        (tmp_path / path).write_text(json.dumps(document | {"sources": kept}))
    args = [*job, "--fail-on-straggler", "--min-time", "100us"]
    code, out, err = run(capsys, *args)
    assert run(capsys, *args, "--html", "page.html") == (code, out, err) == (1, out, err)
    page = ParsedPage((tmp_path / "page.html").read_text())
    rows = page.lines("f1")
    assert (rows[12].cells[3][1], rows[40].cells[3][1]) == ("step()", "save()")
    step = {row.attributes["data-site"]: row for row in page.sites("ranking")}["step app.py:12"]
    assert [cell for _, cell in step.cells[5:7]] == ["800 us / 820 us / 1.60 ms", "rank 2"]


# --- hostile files: one line, or a page with none of their markup ---------------------------

MARKUP = '<script>alert(1)</script><img src=x onerror="alert(2)">\'"&'
MARKED_FILE = '<img src=x onerror="alert(3)">&.json'  # a file name holds no slash


def marked_profile(rank: int) -> dict:
    """A valid profile of rank `rank` (of 2) with markup in every string a page or table could
    show: names, kernels, library, graph replay lines, unattributed kernels, the version, the
    rank's host, launcher and device, source paths and lines."""
    path = "<b>app.py"
    site = SiteTotals(
        3, 3_000_000, 1, {MARKUP: KernelTotals(2, 2_000_000), "k": KernelTotals(1, 1_000_000)},
        replays={f"{MARKUP} {path}:40": KernelTotals(1, 1000)},
    )  # fmt: skip
    unattributed = SiteTotals(2, 500, 0, {MARKUP: KernelTotals(2, 500)})
    document = profile_document(Profile({f"{MARKUP} {path}:12": site}, unattributed))
    document["sites"][0]["lib"] = MARKUP
    record = meta(Rank(rank, None, 2, MARKUP), device=MARKUP, host=MARKUP, pid=1)
    sources = {path: [{"first": 11, "lines": [MARKUP, f"\t{MARKUP}"]}]}
    return document | {"kname": MARKUP, "ranks": [record], "sources": sources}


def marked_census() -> dict:
    return census(step_app_py__12=3) | {"kname": MARKUP} | {
        "sites": [{"name": f"{MARKUP} <b>app.py:12", "kernel": MARKUP, "lib": MARKUP,
                   "launches": 3, "share": 1.0, "order": 1}]
    }  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["r0.json", "--html", "page.html"],
        ["r0.json", "r1.json", "--html", "page.html"],
        ["r0.json", "r1.json", "--by-rank", "--html", "page.html"],
        ["r0.json", "r1.json", "--straggler", "0%", "--min-time", "0", "--html", "page.html"],
        ["r0.json", "--diff", "r1.json", "--html", "page.html"],
        ["c.json", "--html", "page.html"],
        ["c.json", "--diff", "c.json", "--html", "page.html"],
        [MARKED_FILE, "--html", "page.html"],
        ["r0.json", "--diff", MARKED_FILE, "--html", "page.html"],
    ],
)
def test_markup_in_every_string_of_a_file_reaches_no_page_unescaped(files, capsys, tmp_path, args):
    files(r0=marked_profile(0), r1=marked_profile(1), c=marked_census())
    (tmp_path / MARKED_FILE).write_text(render_json(marked_profile(1)))
    code, _, err = run(capsys, *args)
    assert code in (0, 1), err
    assert_no_injected_markup((tmp_path / "page.html").read_text())


def test_markup_where_a_number_goes_is_one_line_and_no_page(files, capsys, tmp_path):
    """The outside trial's file: `unattributed.launches` was never checked, and the page wrote it
    as it was."""
    document = marked_profile(0)
    document["unattributed"]["launches"] = MARKUP
    files(x=document)
    code, out, err = run(capsys, "x.json", "--html", "page.html")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "x.json: unattributed: 'launches' must be a whole number from 0 to 2**63-1" in err
    assert not (tmp_path / "page.html").exists()


GOOD_PROFILE = profile(step_app_py__12=("axpy", 20, 2_000_000))


def hostile(change) -> dict:
    document = json.loads(json.dumps(GOOD_PROFILE))
    change(document)
    return document


def _huge_time(d: dict) -> None:
    d["sites"][0]["gpu_ns"] = d["sites"][0]["kernels"]["axpy"]["gpu_ns"] = 10**400
    d["total_gpu_ns"] = 10**400


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (hostile(_huge_time), "sites[0].gpu_ns must be a whole number from 0 to 2**63-1"),
        (hostile(lambda d: d["unattributed"].pop("launches")), "'unattributed' must be an obj"),
        (hostile(lambda d: d["sites"][0].update(launches="20")), "sites[0].launches must be a w"),
        (hostile(lambda d: d.update(total_launches=2.5)), "'total_launches' must be a whole"),
        (hostile(lambda d: d["sites"][0].update(name="x" * 70_000)), "at most 65,536 characters"),
        (hostile(lambda d: d.update(kname=[1])), "'kname' (the version that wrote it) must be"),
    ],
)
def test_hostile_numbers_and_fields_are_one_line_saying_the_bound(files, capsys, document, message):
    files(bad=document, p=OLD)
    for args in (["bad.json"], ["p.json", "--diff", "bad.json"], ["bad.json", "--html", "x.html"]):
        code, out, err = run(capsys, *args)
        assert (code, out) == (2, "") and err.count("\n") == 1, err
        assert err.startswith("kname report: bad.json: ") and message in err, err


@pytest.mark.parametrize("seconds", ["1000000000000000000000000000000s", "1" + "0" * 400 + "s"])
def test_a_min_time_past_2_63_ns_is_one_line_saying_the_bound(files, capsys, seconds):
    files(old=OLD, new=SLOWER)
    code, out, err = run(capsys, "old.json", "--diff", "new.json", "--min-time", seconds)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "expected a duration of at most 2**63-1 ns" in err


@pytest.mark.parametrize("workers", ["one process", "the parallel merge"])
def test_counts_that_add_up_past_2_63_are_one_line(files, capsys, tmp_path, workers):
    """32 files of 2**62 launches each: a sum that overflows the 64 bits a count is kept in.
    With no ranks each file counts as rank 0 (its slot's 64 bits overflow); with a rank each,
    each slot holds but the site's total does not."""
    share = 2**62 if workers == "one process" else 2**63 // 32 + 1
    document = profile(step_app_py__12=("axpy", share, share))
    paths = files(**{f"p{i:02}": document for i in range(32)})
    code, out, err = run(capsys, *paths)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "too large to add up (past 2**63-1" in err, err
    ranked = {f"r{i:02}": {**document, "ranks": [meta(Rank(i, i, 32), pid=i)]} for i in range(32)}
    code, out, err = run(capsys, *files(**ranked))
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "total_launches adds up to" in err and "past the 2**63-1" in err, err


# Values a crafted file puts where a field was: markup, numbers past every bound, wrong types.
hostile_values = st.one_of(
    st.sampled_from([MARKUP, "", "x" * 70_000, None, True, [], {}, -1, 2**63, 10**400, 0.5]),
    st.sampled_from(["nan", "inf"]).map(float),
    st.integers(),
    st.text(st.sampled_from("<>&\"' a"), max_size=8),
)


def field_paths(value, path=()):
    """The path of every value inside a JSON value, itself included."""
    yield path
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, inner in items:
            yield from field_paths(inner, (*path, key))


def replaced(document, path, value):
    copy = json.loads(json.dumps(document))
    if not path:
        return value
    *parents, last = path
    inner = copy
    for key in parents:
        inner = inner[key]
    inner[last] = value
    return copy


CRAFTED_FROM = [
    marked_profile(0),
    marked_census(),
    json.loads(render_json(merge_documents([marked_profile(0), marked_profile(1)]))),
    json.loads(render_pytest_report({"t.py::t": {"outcome": "passed", **marked_census()}})),
]


@st.composite
def crafted_documents(draw):
    """A valid document with one field (anywhere, a whole object too) replaced by a hostile
    value, or a key renamed to markup."""
    document = draw(st.sampled_from(CRAFTED_FROM))
    path = draw(st.sampled_from(list(field_paths(document))))
    if path and draw(st.booleans()) and isinstance(path[-1], str):  # a key renamed
        parent = json.loads(json.dumps(document))
        inner = parent
        for key in path[:-1]:
            inner = inner[key]
        inner[MARKUP + path[-1]] = inner.pop(path[-1])
        return parent
    return replaced(document, path, draw(hostile_values))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=crafted_documents())
def test_a_crafted_file_is_one_line_and_exit_2_or_a_page_with_none_of_its_markup(
    tmp_path, document
):
    path = tmp_path / "crafted.json"
    page = tmp_path / "page.html"
    page.unlink(missing_ok=True)
    path.write_text(json.dumps(document))
    done = subprocess_free_report(str(path), "--html", str(page))
    code, out, err = done
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("kname report: "), err
        assert not page.exists()
    else:
        assert code == 0, err
        assert_no_injected_markup(page.read_text())


def subprocess_free_report(*args: str) -> tuple[int, str, str]:
    """`kname report ARGS` in this process, its stdout and stderr captured (no capsys: a
    hypothesis test runs many examples in one test)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", *args])
    return code, out.getvalue(), err.getvalue()


# --- a reader that leaves early ---------------------------------------------------------------


def test_a_reader_that_leaves_early_changes_neither_the_exit_code_nor_the_files_written(tmp_path):
    """`kname report a.json --diff b.json --fail-on-slower 10% --html p.html | head -1` exited
    0 (the BrokenPipeError was taken for success) and never wrote the page: a CI gate that
    passed. A real pipe, read one line and closed, under a diff too long for the pipe's buffer."""
    sites = {f"step_app_py__{line}": ("axpy", 10, 1_000_000) for line in range(1, 3001)}
    slower = {name: ("axpy", 10, 2_000_000) for name in sites}
    (tmp_path / "a.json").write_text(render_json(profile(**sites)))
    (tmp_path / "b.json").write_text(render_json(profile(**slower)))
    args = ["a.json", "--diff", "b.json", "--fail-on-slower", "10%", "--html", "p.html"]
    # Buffered, as from a shell: unbuffered (PYTHONUNBUFFERED), CPython takes a pipe's partial
    # write for a whole one and drops the rest without an error.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO)
    process = subprocess.Popen(
        [sys.executable, "-m", "kname", "report", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=env,
    )  # fmt: skip
    first = process.stdout.readline()
    process.stdout.close()  # as `head -1` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1, err
    assert first.startswith(b"kname profile diff: a.json")
    assert err == (
        "kname report: 3000 call sites and the total got slower by more than 10% and 50.0 us "
        "(--fail-on-slower)\n"
    )
    assert len(ParsedPage((tmp_path / "p.html").read_text()).sites("changes")) == 3000


def test_report_py_keeps_the_logic_and_cli_py_the_wiring() -> None:
    """Every command's argparse wiring is in cli.py (#37); report.py adds no argument."""
    tree = ast.parse((REPO / "kname" / "documents" / "report.py").read_text())
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & {"add_parser", "add_argument", "set_defaults"}


def test_a_page_asked_at_a_dash_is_one_line_and_no_file(files, tmp_path, capsys):
    (saved,) = files(census=census_of({("step_app_py__3", "axpy"): 2}))
    code, _, err = run(capsys, saved, "--html", "-")
    assert code == 2 and err.startswith("kname report: --html -: ") and err.count("\n") == 1, err
    assert not (tmp_path / "-").exists()
