"""A document as a table: a profile ranked by GPU time, a census by launches, both safe for a
terminal whatever the names in them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from hypothesis import assume, given
from hypothesis import strategies as st
from support import REPO
from support.profile_streams import (
    census_of,
    documents,
    hostile_documents,
    hostile_names,
    terminal_safe,
)

from kname.documents.build import profile_document
from kname.documents.diff import render_count_changes, render_diff, render_gpu_diff
from kname.documents.kernel_names import display_name
from kname.documents.merge import merge_documents
from kname.documents.schema import RANKS, render_json
from kname.documents.tables import (
    CUT,
    KERNELS_SHOWN,
    NAME_WIDTH,
    advice_lines,
    cut,
    kernel_cells,
    kernels_cell,
    name_cell,
    render_by_rank,
    render_census_table,
    render_profile_table,
    render_table,
)
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.ranks import Rank, meta


def document_of(sites: dict[str, dict[str, tuple[int, int]]], lost: int = 0) -> dict:
    built = {}
    for rank, (name, kernels) in enumerate(sites.items(), 1):
        totals = SiteTotals(first=rank)
        for kernel, (launches, gpu_ns) in kernels.items():
            totals.kernels[kernel] = KernelTotals(launches, gpu_ns)
            totals.launches += launches
            totals.gpu_ns += gpu_ns
        built[name] = totals
    unattributed = SiteTotals(lost, lost * 1000, 0, {"lost": KernelTotals(lost, lost * 1000)})
    return profile_document(Profile(built, unattributed if lost else SiteTotals()))


def test_the_table_ranks_sites_by_gpu_time_with_share_mean_and_kernels():
    document = document_of(
        {
            "main app.py:30": {"ampere_sgemm": (20, 1_500_000), "[memset]": (20, 500_000)},
            "step app.py:12": {"axpy": (20, 8_100_000)},
        }
    )
    lines = render_profile_table(document).splitlines()
    assert lines[0] == "kname profile: 10.1 ms of GPU time in 60 launches from 2 call sites"
    assert lines[1].split() == [
        "call",
        "site",
        "GPU",
        "time",
        "share",
        "launches",
        "mean",
        "kernels",
    ]
    assert re.split(r"\s{2,}", lines[2]) == [
        "step app.py:12", "8.10 ms", "80.2%", "20", "405 us", "axpy 8.10 ms (20)",
    ]  # fmt: skip
    assert re.split(r"\s{2,}", lines[3]) == [
        "main app.py:30", "2.00 ms", "19.8%", "40", "50.0 us",
        "ampere_sgemm 1.50 ms (20), [memset] 500 us (20)",
    ]  # fmt: skip
    assert len(lines) == 4


def test_graph_work_is_on_its_capture_line_with_the_replay_line_beside_it():
    made = SiteTotals(60, 200_000, 1, {"gemm": KernelTotals(60, 200_000)})
    made.replays = {
        "step runner.py:26": KernelTotals(40, 150_000),
        "warm runner.py:9": KernelTotals(10, 1),
    }
    again = SiteTotals(3, 30, 2, {"add": KernelTotals(3, 30)}, {"a.py:1": KernelTotals(3, 30)})
    unseen = SiteTotals(4, 900, 3, {"add": KernelTotals(4, 900)}, unseen=KernelTotals(4, 900))
    sites = {"y = x * 2.0  model.py:21": made, "z model.py:22": again, "step runner.py:40": unseen}
    lines = render_profile_table(profile_document(Profile(sites, SiteTotals()))).splitlines()
    assert lines[2].startswith(
        "y = x * 2.0  model.py:21  (graph replayed at step runner.py:26, warm runner.py:9: "
        "50 of 60 launches)    200 us"
    )
    assert lines[3].startswith("step runner.py:40  (graph replayed here, its capture not seen)")
    assert lines[4].startswith("z model.py:22  (graph replayed at a.py:1) ")


def test_top_shows_the_first_sites_and_sums_the_rest():
    document = document_of({f"f{i} app.py:{i}": {"k": (1, 1000 * (10 - i))} for i in range(5)})
    lines = render_profile_table(document, top=2).splitlines()
    assert [line.split()[0] for line in lines[2:4]] == ["f0", "f1"]
    assert lines[4] == "... and 3 more call sites: 21.0 us (52.5%)"


def test_unattributed_work_is_a_row_and_a_line_asking_for_a_report():
    lines = render_profile_table(document_of({"step app.py:1": {"k": (1, 5000)}}, lost=2))
    lines = lines.splitlines()
    assert lines[3].split()[:2] == ["<unattributed>", "2.00"]
    assert lines[-1] == (
        "kname profile: 2 GPU records (2.00 us) could not be attributed to a call site; "
        "please report this"
    )


def test_a_saved_profile_names_its_file_and_merged_processes():
    document = document_of({"step app.py:1": {"k": (1, 5000)}}) | {"processes": 4}
    heading = render_profile_table(document, source="all.json").splitlines()[0]
    assert heading.startswith("kname profile (all.json, written by kname ")
    assert ", 4 processes): 5.00 us of GPU time" in heading


def test_kernels_beyond_three_are_counted():
    cell = kernels_cell({f"k{i}": {"launches": 1, "gpu_ns": 10 - i} for i in range(5)})
    assert cell == "k0 10 ns (1), k1 9 ns (1), k2 8 ns (1), +2 more"


@given(documents)
def test_every_site_has_one_row_in_rank_order(document):
    lines = render_profile_table(document).splitlines()
    names = [site["name"] for site in document["sites"]]
    if not names and not document["unattributed"]["launches"]:
        assert len(lines) == 1  # the heading alone
        return
    assert lines[1].startswith("call site")
    rows, rest = lines[2 : 2 + len(names)], lines[2 + len(names) :]
    for row, name in zip(rows, names, strict=True):
        assert row.startswith(name + " ")
    unattributed = document["unattributed"]["launches"]
    advice = advice_lines(document["sites"])  # one line per launch-bound site
    assert len(rest) == (2 if unattributed else 0) + len(advice)


@given(hostile_documents, hostile_names)
def test_hostile_names_and_file_labels_reach_the_terminal_escaped(document, source):
    text = render_profile_table(document, source=source)
    assert terminal_safe(text)
    unattributed = bool(document["unattributed"]["launches"])
    sites = document["sites"]
    rows = len(sites) + unattributed
    # No name broke a line: the heading, the header and rows, the advice to launch-bound lines,
    # the line about unattributed work.
    advice = len(advice_lines(sites))
    assert len(text.splitlines()) == 1 + (1 + rows if rows else 0) + advice + unattributed
    for site in sites:
        assert name_cell(site["name"]) in text
        for kernel in list(site["kernels"])[:KERNELS_SHOWN]:
            assert name_cell(display_name(kernel)) in text


def test_either_schema_renders():
    census = {
        "kname": "0.1.0",
        "schema": 1,
        "sites": [{"name": "main app.py:22", "kernel": "axpy", "lib": "numba", "launches": 3,
                   "share": 1.0, "order": 1}],
        "total_launches": 3,
    }  # fmt: skip
    assert render_table(census, source="c.json") == render_census_table(census, source="c.json")
    profile = document_of({"step app.py:1": {"k": (1, 5000)}})
    assert render_table(profile) == render_profile_table(profile)


GOOD = census_of({("step app.py:3", "axpy"): 2})


def test_tables_and_diffs_escape_what_a_terminal_would_obey() -> None:
    hostile = census_of({("step \x1b[2J a.py:1", "ax\x00py"): 2, ("ok \ud800 b.py:2", "k"): 1})
    table = render_census_table(hostile, source="evil\x1b[31m.json")
    diff = render_diff(GOOD, hostile, ("a\x07.json", "b.json"))
    for text in (table, diff):
        assert all(line.isprintable() for line in text.splitlines()), text
    assert "step \\x1b[2J a.py:1" in table and "ax\\x00py" in table and "\\ud800" in table
    assert "evil\\x1b[31m.json" in table
    assert "step \\x1b[2J a.py:1 [ax\\x00py]" in diff and "a\\x07.json" in diff


# --- a name too long for a table -----------------------------------------------------------------

# Call-site names as deep paths make them: a function, a path of many folders, a line.
folders = st.text("abcdefghij_/.-é", min_size=1, max_size=30)
long_names = st.builds(
    "{} {}/x.py:{}".format,
    st.sampled_from(["step", "forward", "<module>"]),
    st.lists(folders, min_size=1, max_size=60).map("/".join),
    st.integers(1, 10**6),
)
widths = st.integers(len(CUT) + 1, 300)


@given(long_names, widths)
def test_a_cut_name_is_never_wider_than_the_cap_and_is_the_names_start_and_end(name, width):
    shown = cut(name, width)
    assert len(shown) <= width
    if len(name) <= width:
        assert shown == name
        return
    kept = width - len(CUT)  # at least two thirds of what is kept from the start, the rest the end
    start = kept - kept // 3
    assert shown == name[:start] + CUT + name[len(name) - (kept - start) :]
    assert name.startswith(shown[:start])


@given(long_names, st.integers(1, 10**6), widths)
def test_call_sites_of_one_long_file_that_differ_in_their_line_stay_told_apart(name, line, width):
    other = name.rsplit(":", 1)[0] + f":{line}"
    # Both lines fit in the end the cut keeps (else 1 and 2071 both end in "1").
    kept_at_end = (width - len(CUT)) // 3
    lines = (str(line), name.rsplit(":", 1)[1])
    assume(other != name and all(len(number) <= kept_at_end for number in lines))
    assert cut(other, width) != cut(name, width)


@given(long_names, st.data())
def test_names_that_differ_in_what_the_cut_keeps_give_different_cuts(name, data):
    kept = NAME_WIDTH - len(CUT)
    start, end = kept - kept // 3, kept // 3
    kept_positions = [*range(min(start, len(name))), *range(max(len(name) - end, 0), len(name))]
    position = data.draw(st.sampled_from(kept_positions))
    other = name[:position] + ("#" if name[position] != "#" else "$") + name[position + 1 :]
    assert cut(other) != cut(name)


# Two cuBLAS kernels whose names differ only in the middle, which both cuts drop (issue 46).
CUBLAS = [
    "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage3_warpsize1x4x1_ffma_aligna4"
    f"_alignc4_execute_kernel_cublas_{split}"
    for split in ("splitk", "reduce")
]
# Kernel names as profiles carry them: plain, mangled C++ (demangled and cut), long library
# names that share their start and end, and copy records.
kernel_names = st.one_of(
    st.text(max_size=200),
    st.builds(lambda middle: CUBLAS[0].replace("splitk", middle), st.text(max_size=40)),
    st.builds(lambda n, name: f"_Z{n}{name}Pfi", st.integers(1, 300), st.text("ab", max_size=300)),
    st.builds("[memcpy {}]".format, st.text(max_size=200)),
)


@given(st.lists(kernel_names, unique=True, max_size=12))
def test_distinct_kernel_names_have_distinct_cells_no_wider_than_a_name(names):
    cells = kernel_cells(names)
    assert len(set(cells.values())) == len(names)
    assert all(len(cell) <= NAME_WIDTH for cell in cells.values())


def test_two_cublas_kernels_cut_alike_are_told_apart_in_the_table_and_the_diff():
    assert display_name(CUBLAS[0]) == display_name(CUBLAS[1])  # what made them meet
    document = document_of({"step app.py:5": {CUBLAS[0]: (2, 90_000), CUBLAS[1]: (1, 10_000)}})
    cell = render_profile_table(document).splitlines()[-1].split("  ")[-1]
    first, second = (part.rsplit(" ", 3)[0] for part in cell.split(", "))
    assert first != second and first.startswith("sm80_xmma_gemm_") and "...#" in first
    after = document_of({"step app.py:5": {CUBLAS[0]: (3, 90_000), CUBLAS[1]: (2, 10_000)}})
    rows = render_count_changes(document, after, ("a", "b")).splitlines()[1:]
    assert len(rows) == 2 and rows[0].split("]")[0] != rows[1].split("]")[0]


def test_two_long_census_kernels_cut_alike_are_told_apart_in_its_table_and_diff():
    long = ["k" + "a" * 100 + middle + "z" * 100 for middle in ("one", "two")]
    before = census_of({("step app.py:5", long[0]): 2, ("step app.py:6", long[1]): 1})
    after = census_of({("step app.py:5", long[0]): 3, ("step app.py:6", long[1]): 2})
    table = [re.split("  +", line)[1] for line in render_census_table(before).splitlines()[2:]]
    diff = re.findall(r"\[(.*)\]", render_diff(before, after, ("a", "b")))
    for cells in (table, diff):
        assert len(cells) == 2 and cells[0] != cells[1]


# One 60,000-character name among many short ones (a saved file's names are at most
# schema.MAX_TEXT, 65,536, long: a 100,000-character one is refused on read).
HUGE = "step " + "d/" * 30_000 + "x.py:7"
SITES = 200


def two_ranks(document: dict) -> list[dict]:
    """`document` as ranks 0 and 1 of a job each wrote it."""
    return [
        {**document, RANKS: [meta(Rank(rank, rank, 2, "torchrun"), host="n", pid=rank)]}
        for rank in (0, 1)
    ]


def test_one_huge_name_widens_no_row_of_any_text_table():
    names = [f"f{n} app.py:{n}" for n in range(SITES)] + [HUGE]
    profile = document_of({name: {"k": (1, 1000 + n)} for n, name in enumerate(names)})
    census = census_of({(name, HUGE if name == HUGE else "k"): 1 for name in names})
    merged_profile, merged_census = (
        merge_documents(two_ranks(profile)),
        merge_documents(two_ranks(census)),
    )
    slower = document_of({name: {"k": (1, 10**6 + n)} for n, name in enumerate(names)})
    tables = {
        "profile": render_profile_table(merged_profile),
        "census": render_census_table(merged_census),
        "profile by rank": render_by_rank(merged_profile),
        "census by rank": render_by_rank(merged_census),
        "census diff": render_diff(census_of({}), census, ("a.json", "b.json")),
        "profile diff": render_gpu_diff(profile, slower, ("a.json", "b.json"), 0.1),
        "launch changes": render_count_changes(document_of({}), slower, ("a.json", "b.json")),
    }
    for what, text in tables.items():
        lines = text.splitlines()
        assert len(lines) >= SITES, what
        # Every row as wide as a short name's, give or take the cut name: no 60,000 padding.
        assert max(map(len, lines)) < 2 * NAME_WIDTH + 150, what
        assert HUGE not in text and cut(HUGE) in text, what
    assert HUGE in render_json(profile)  # the JSON keeps the name whole


# kname report on a census of 20,000 sites, one of them named with 60,000 characters, in a
# process whose address space is capped at 600 MB: padded to that name, the table alone is 1.2 GB.
REPORT_UNDER_A_LIMIT = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (600 * 2**20, 600 * 2**20))
sys.argv = ["kname", "report", sys.argv[1]]
runpy.run_module("kname", run_name="__main__")
"""


def test_kname_report_prints_a_huge_name_among_many_sites_in_bounded_memory(tmp_path):
    counts = {(f"f{n} app.py:{n}", "axpy"): 1 for n in range(20_000)} | {(HUGE, "axpy"): 1}
    path = tmp_path / "census.json"
    path.write_text(render_json(census_of(counts)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", REPORT_UNDER_A_LIMIT, str(path)], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout) < 20_002 * (NAME_WIDTH + 80)
    assert cut(HUGE) in done.stdout
