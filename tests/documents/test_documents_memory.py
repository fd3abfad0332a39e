"""Memory per line in a saved profile: its fields bounded on read, merged, compared
(`kname report --diff --fail-on-more-memory`), in the table and on the page."""

from __future__ import annotations

import copy
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO
from support.html_pages import ParsedPage, assert_no_injected_markup
from support.profile_streams import TERMINAL_HOSTILE

from kname.cli import main
from kname.config import read_config
from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.memory import format_bytes, more_memory, with_memory
from kname.documents.merge import Merge, merge_documents
from kname.documents.pages.profile import render_profile_page
from kname.documents.schema import DocumentError, render_json, validate
from kname.documents.tables import render_profile_table
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.profiling.memory import Ledger

MIB = 1 << 20


def profiled(events: list[tuple[str, str, int, int]]) -> dict:
    """A profile whose line `step app.py:12` launched, with memory from `events`: (view, site,
    address, bytes), bytes 0 meaning a free of that address."""
    step = SiteTotals(2, 5_000, 1, {"axpy": KernelTotals(2, 5_000)})
    document = profile_document(Profile({"step app.py:12": step}, SiteTotals()))
    ledgers: dict[str, Ledger] = {}
    for time, (view, site, address, size) in enumerate(events):
        ledger = ledgers.setdefault(view, Ledger())
        if size:
            ledger.allocate(site, address, size, time)
        else:
            ledger.free(address, time)
    return with_memory(document, ledgers)


DOCUMENT = profiled(
    [
        ("torch", "step app.py:12", 1, 16 * MIB),
        ("torch", "load app.py:7", 2, 96 * MIB),
        ("device", "step app.py:12", 10, 20 * MIB),
        ("device", "load app.py:7", 11, 96 * MIB),
        ("torch", "load app.py:7", 2, 0),
    ]
)


def saved(document: dict) -> dict:
    return validate(json.loads(render_json(document)), "p.json")


def test_memory_fields_survive_the_json_and_a_line_that_only_allocated_becomes_a_site():
    document = saved(DOCUMENT)
    sites = {site["name"]: site for site in document["sites"]}
    assert sites["load app.py:7"]["launches"] == 0
    assert sites["load app.py:7"]["memory"]["torch"] == {
        "allocated": 96 * MIB, "allocations": 1, "freed": 96 * MIB, "frees": 1,
        "peak": 96 * MIB, "at_peak": 96 * MIB,
    }  # fmt: skip
    assert document["memory"]["torch"]["peak"] == 112 * MIB
    assert document["memory"]["torch"]["live"] == 16 * MIB


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["sites"][0]["memory"]["torch"].update(allocated=-1), "each a whole number"),
        (lambda d: d["sites"][0]["memory"]["torch"].update(peak=2**63), "each a whole number"),
        (lambda d: d["sites"][0]["memory"]["torch"].update(at_peak=10**12), "within allocated"),
        (lambda d: d["sites"][0].update(memory=[1]), "at most 16 views"),
        (lambda d: d["sites"][0].update(memory={"x" * 33: {}}), "at most 16 views"),
        (lambda d: d["sites"][0].update(memory={str(i): {} for i in range(17)}), "16 views"),
        (lambda d: d["memory"]["torch"].update(peak="1"), "each a whole number"),
        (lambda d: d["memory"]["torch"].update(timeline=[[1, 2, 3]]), "timeline must list"),
        (lambda d: d["memory"]["torch"].update(timeline=[[0, 1]] * 4097), "at most 4096"),
        (lambda d: d["memory"]["torch"].update(timeline=None), "timeline must list"),
    ],
)
def test_a_hostile_memory_field_is_one_line(change, message):
    document = json.loads(render_json(DOCUMENT))
    change(document)
    with pytest.raises(DocumentError, match=message) as caught:
        validate(document, "p.json")
    assert str(caught.value).startswith("p.json: ") and "\n" not in str(caught.value)


def test_a_profile_written_before_memory_reads_and_shows_as_before():
    document = copy.deepcopy(DOCUMENT)
    for site in document["sites"]:
        site.pop("memory", None)
    del document["memory"]
    document["sites"] = [s for s in document["sites"] if s["launches"]]
    table = render_profile_table(saved(document))
    assert "allocated" not in table and "memory peak" not in table


def test_the_table_shows_a_pool_view_first_and_each_views_peak_line():
    table = render_profile_table(saved(DOCUMENT)).splitlines()
    assert table[1].split()[7:11] == ["allocated", "peak", "held", "kernels"]
    step = next(line for line in table if line.startswith("step app.py:12"))
    assert "16.0 MiB (torch)" in step
    assert "memory peak (torch): 112.0 MiB, most held by load app.py:7" in table
    assert "memory peak (device): 116.0 MiB, most held by load app.py:7" in table


def test_merged_profiles_sum_bytes_keep_the_highest_peaks_and_the_timeline_of_that_peak():
    bigger = profiled([("torch", "load app.py:7", 2, 200 * MIB)])
    merged = saved(merge_documents([saved(DOCUMENT), saved(bigger)]))
    sites = {site["name"]: site for site in merged["sites"]}
    load = sites["load app.py:7"]["memory"]["torch"]
    assert load["allocated"] == 296 * MIB and load["allocations"] == 2
    assert load["peak"] == 200 * MIB and load["at_peak"] == 200 * MIB
    assert merged["memory"]["torch"]["peak"] == 200 * MIB
    assert merged["memory"]["torch"]["timeline"] == bigger["memory"]["torch"]["timeline"]
    assert merged["memory"]["device"] == DOCUMENT["memory"]["device"]


@given(st.permutations([0, 1, 2]))
def test_a_merge_gives_the_same_memory_whichever_order_and_grouping_the_files_come_in(order):
    documents = [
        saved(DOCUMENT),
        saved(profiled([("torch", "load app.py:7", 2, 200 * MIB)])),
        saved(profiled([("device", "step app.py:12", 5, 3 * MIB)])),
    ]
    expected = merge_documents(documents)
    first, rest = Merge(), Merge()
    first.add(documents[order[0]])
    for index in order[1:]:
        rest.add(documents[index])
    first.absorb(rest)
    result = first.result()
    assert result["memory"] == expected["memory"]
    assert {s["name"]: s.get("memory") for s in result["sites"]} == {
        s["name"]: s.get("memory") for s in expected["sites"]
    }


def test_more_memory_needs_both_the_share_and_the_bytes():
    before = profiled([("torch", "a.py:1", 1, 10 * MIB)])
    after = profiled([("torch", "a.py:1", 1, 12 * MIB)])
    assert more_memory(before, after, 0.10, MIB) == [("torch", 10 * MIB, 12 * MIB)]
    assert more_memory(before, after, 0.25, MIB) == []
    assert more_memory(before, after, 0.10, 4 * MIB) == []
    assert more_memory(after, before, 0.0, 0) == []  # less memory never fails
    new_view = profiled([("cupy", "a.py:1", 1, 2 * MIB)])
    assert more_memory(before, new_view, 0.10, MIB) == [("cupy", 0, 2 * MIB)]


def test_kname_report_diff_says_each_peak_and_fails_on_more_memory_only_when_asked(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.json").write_text(render_json(profiled([("torch", "a.py:1", 1, 10 * MIB)])))
    (tmp_path / "new.json").write_text(render_json(profiled([("torch", "a.py:1", 1, 24 * MIB)])))
    assert main(["report", "old.json", "--diff", "new.json"]) == 0
    out = capsys.readouterr().out
    assert (
        "memory peak (torch): 10.0 MiB -> 24.0 MiB (+14.0 MiB) (most held at the peak by a.py:1)"
        in out
    )
    assert main(["report", "old.json", "--diff", "new.json", "--fail-on-more-memory", "50%"]) == 1
    err = capsys.readouterr().err
    assert err.endswith(
        "the memory peak grew by more than 50% and 1.0 MiB (torch 10.0 MiB -> 24.0 MiB) "
        "(--fail-on-more-memory)\n"
    )
    assert main(["report", "old.json", "--diff", "new.json", "--fail-on-more-memory", "200%"]) == 0
    assert main(["report", "old.json", "--fail-on-more-memory", "5%"]) == 2
    assert "--fail-on-more-memory needs --diff" in capsys.readouterr().err
    assert main(["report", "old.json", "--diff", "new.json", "--fail-on-more-memory", "x"]) == 2
    assert "--fail-on-more-memory 'x': expected a percentage" in capsys.readouterr().err


def test_the_page_draws_each_views_timeline_with_its_peak_and_a_memory_cell_per_line():
    page = render_profile_page(saved(DOCUMENT))
    assert_no_injected_markup(page)
    parsed = ParsedPage(page)
    assert 'data-view="torch" data-peak-bytes="117440512"' in page
    assert "<th>memory</th>" in page
    assert "16.0 MiB (torch)" in page
    assert "polyline" in parsed.tags and "circle" in parsed.tags


def test_hostile_line_names_are_escaped_in_the_memory_parts_of_the_table_and_page():
    name = f"load {TERMINAL_HOSTILE} app.py:7"
    document = saved(profiled([("torch", name, 1, 5 * MIB)]))
    assert_no_injected_markup(render_profile_page(document))
    peak = next(line for line in render_profile_table(document).splitlines() if "peak (" in line)
    assert "\x1b" not in peak and "\n" not in peak


@pytest.mark.parametrize(
    ("value", "memory", "problem"),
    [("1", True, False), ("on", True, False), ("0", False, False), ("lots", False, True)],
)
def test_kname_profile_memory_is_a_switch_read_in_profile_mode(value, memory, problem):
    config = read_config({"KNAME_MODE": "profile", "KNAME_PROFILE_MEMORY": value})
    assert config.memory is memory
    said = [p for p in config.problems if "KNAME_PROFILE_MEMORY" in p]
    assert bool(said) is problem
    if problem:
        assert said == ["KNAME_PROFILE_MEMORY='lots' is not one of 1, true, yes, on, 0, false, "
                        "no, off; memory is not profiled"]  # fmt: skip


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0"),
        (512, "512 B"),
        (3 * 1024, "3.0 KiB"),
        (16 * MIB, "16.0 MiB"),
        (3 << 29, "1.50 GiB"),
    ],
)
def test_bytes_are_shown_in_binary_units(count, shown):
    assert format_bytes(count) == shown


def test_the_readmes_memory_sample_is_what_kname_profile_memory_printed_on_the_h100():
    """tests/data/memory_profile_h100.json: `kname profile --memory --json` of
    tests/gpu/memory_demo.py on the H100 (batch 1); the README shows two of its lines, cut."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"<!-- readme-test: memory-table -->\n```\n(.*?)```", readme, re.DOTALL)
    assert block is not None
    row, peak = block.group(1).splitlines()
    table = render_profile_table(load(str(REPO / "tests" / "data" / "memory_profile_h100.json")))
    name, allocated, held = re.split(r"  +", row)
    (line,) = [line for line in table.splitlines() if line.startswith(name + " ")]
    assert re.search(rf"  {re.escape(allocated)}  +{re.escape(held)}(  |$)", line), line
    assert peak in table.splitlines()
