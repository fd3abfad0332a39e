"""A profile's page, parsed back with html.parser: its ranking (bars and table), its source views
and its call tree, checked against the document it was made from.

The page must stand alone: no script, nothing loaded from elsewhere, every link to a place in
the page itself. Every name, path and source line is hostile input.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_pages import (
    ATTRIBUTES,
    PATHS,
    TAGS,
    ParsedPage,
    per_line,
    shown_code,
    sourced_profiles,
)
from support.profile_streams import documents, hostile_documents, hostile_names
from support.recorded_pages import h200_document

from kname.documents.build import profile_document
from kname.documents.merge import merge_documents
from kname.documents.pages.layout import text
from kname.documents.pages.profile import BAR_WIDTH, BARS_SHOWN, render_profile_page
from kname.documents.schema import RANKS
from kname.documents.sources import SOURCES, lines_of
from kname.documents.tables import graph_note
from kname.documents.text import format_duration, printable
from kname.documents.verdict import LAUNCH_TIMES, site_advice, site_verdict
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.ranks import Rank, meta

BARS = re.compile(r'<g class="bar" data-site="([^"]*)" data-gpu-ns="(\d+)">.*?width="([\d.]+)"')


def document_of(times: dict[str, int]) -> dict:
    sites = {
        name: SiteTotals(3, gpu_ns, rank, {"_Z9scale_rawPfi": KernelTotals(3, gpu_ns)})
        for rank, (name, gpu_ns) in enumerate(times.items(), 1)
    }
    return profile_document(Profile(sites, SiteTotals()))


# --- the ranking ----------------------------------------------------------------------------


@given(documents)
def test_bars_are_as_long_as_their_gpu_time_and_in_rank_order(document):
    page = render_profile_page(document)
    bars = [(site, int(ns), float(width)) for site, ns, width in BARS.findall(page)]
    sites = document["sites"][:BARS_SHOWN]
    assert [(site, ns) for site, ns, _ in bars] == [(text(s["name"]), s["gpu_ns"]) for s in sites]
    longest = max((s["gpu_ns"] for s in sites), default=0)
    for _, ns, width in bars:
        expected = BAR_WIDTH * ns / longest if longest else 0
        # Written to one decimal: off by at most half of 0.1 (and a float's last bit).
        assert width == pytest.approx(expected, abs=0.05 + 1e-9)


@given(documents)
def test_the_table_has_every_site_with_its_numbers(document):
    rows = ParsedPage(render_profile_page(document)).sites("ranking")
    assert [row.attributes["data-site"] for row in rows] == [s["name"] for s in document["sites"]]
    for row, site in zip(rows, document["sites"], strict=True):
        name, _time, _share, launches, _mean, kernels = (cell for _, cell in row.cells)
        note = graph_note(site, text=str).strip().removeprefix("(").removesuffix(")")
        assert name == site["name"] + note + verdict_text(site)
        assert int(launches) == site["launches"]
        assert kernels.count(":") >= len(site["kernels"])


def verdict_text(site: dict) -> str:
    """What the page says beneath a site whose launches were timed (documents/verdict.py)."""
    times = site.get(LAUNCH_TIMES)
    if not times:
        return ""
    cpu = format_duration(times["cpu_ns"] / times["calls"])
    said = f": launch-bound, {site_advice(site)}" if site_verdict(site) else ""
    return f"launch CPU {cpu} a call, GPU idle {format_duration(times['idle_ns'])}{said}"


def test_a_site_of_graph_work_shows_the_lines_that_replayed_it_beneath_its_own():
    made = SiteTotals(50, 183_000, 1, {"gemm": KernelTotals(50, 183_000)})
    made.replays["step runner.py:26"] = KernelTotals(50, 183_000)
    replay_line = SiteTotals(4, 900, 2, {"add": KernelTotals(4, 900)}, unseen=KernelTotals(4, 900))
    page = render_profile_page(
        profile_document(
            Profile(
                {"y = x * 2.0  model.py:21": made, "step runner.py:40": replay_line}, SiteTotals()
            )
        )
    )
    assert (
        '<td class="site"><a href="#f1-L21"><span class="call">y = x * 2.0  model.py:21</span>'
        '</a><div class="graph">graph replayed at step runner.py:26</div></td>'
    ) in page
    assert '<div class="graph">graph replayed here, its capture not seen</div>' in page


def test_names_are_escaped_and_read_back_exactly():
    name = 'f<b>&"x" app.py:1'
    page = render_profile_page(document_of({name: 10_000, "g app.py:2": 5_000}))
    rows = ParsedPage(page).sites("ranking")
    assert [row.attributes["data-site"] for row in rows] == [name, "g app.py:2"]
    assert [cell for _, cell in rows[0].cells[:5]] == [name, "10.0 us", "66.7%", "3", "3.33 us"]
    assert rows[0].cells[5][1] == "scale_raw: 10.0 us (3)"
    assert "b" not in ParsedPage(page).tags
    assert [float(width) for *_, width in BARS.findall(page)] == [BAR_WIDTH, BAR_WIDTH / 2]


def test_a_merged_profile_of_several_ranks_shows_each_lines_spread():
    parts = []
    for rank, gpu_ns in enumerate([2_000, 3_000, 9_000]):
        part = document_of({"step app.py:12": gpu_ns, "save app.py:30": 500 if rank else 0})
        parts.append({**part, RANKS: [meta(Rank(rank, rank, 3, "slurm"), pid=rank)]})
    page = render_profile_page(merge_documents(parts))
    parsed = ParsedPage(page)
    (step,) = [
        row for row in parsed.sites("ranking") if row.attributes["data-site"] == "step app.py:12"
    ]
    assert [cell for _, cell in step.cells[5:7]] == ["2.00 us / 3.00 us / 9.00 us", "rank 2"]
    spreads = re.findall(r'data-min-ns="(\d+)" data-median-ns="(\d+)" data-max-ns="(\d+)"', page)
    assert spreads == [("2000", "3000", "9000"), ("0", "500", "500")]
    headers = [cell for _, cell in parsed.rows_of("ranking")[0].cells]
    assert headers[5:7] == ["across ranks:min / median / max", "slowest"]
    assert set(parsed.tags) <= TAGS
    assert {name for name, _ in parsed.attributes} <= ATTRIBUTES
    assert "across ranks" not in render_profile_page(parts[0])  # one rank: no spread


def test_unattributed_work_is_a_warning_on_the_page():
    document = document_of({"s app.py:1": 1_000})
    document["unattributed"] = {"launches": 2, "gpu_ns": 40, "kernels": {}}
    assert "2 GPU records (40 ns) could not be attributed" in render_profile_page(document)


def test_the_chart_scales_to_the_window():
    page = render_profile_page(document_of({"s app.py:1": 1_000}))
    width, height = re.search(r'<svg class="chart" width="(\d+)" height="(\d+)"', page).groups()
    assert f'viewBox="0 0 {width} {height}"' in page
    assert re.search(r"svg\.chart \{[^}]*max-width: 100%", page)


# --- the source views -----------------------------------------------------------------------


@settings(deadline=None)  # a page of dozens of rows: slow on a busy machine
@given(sourced_profiles())
def test_every_link_goes_to_a_place_in_the_page(made):
    document, _ = made
    page = ParsedPage(render_profile_page(document))
    assert len(page.ids) == len(set(page.ids))
    assert page.hrefs and all(href.startswith("#") for href in page.hrefs)
    assert {href[1:] for href in page.hrefs} <= set(page.ids)


@settings(deadline=None)  # a page of dozens of rows: slow on a busy machine
@given(sourced_profiles())
def test_every_site_links_to_its_line_which_shows_its_source_and_gpu_time(made):
    document, chains = made
    page = ParsedPage(render_profile_page(document))
    views = page.view_of_file()
    on_line = per_line(document, chains, "gpu_ns")
    for row in page.sites("ranking"):
        chain = chains[row.attributes["data-site"]]
        if not chain:  # a site that names no line links nowhere
            assert not row.links
            continue
        _, path, line = chain[0]
        view = views[printable(path)]
        assert row.links[0] == f"#{view}-L{line}"
        kept = lines_of(document[SOURCES].get(path, []))
        number, gpu_time, _launches, code, _kernels = (c for _, c in page.lines(view)[line].cells)
        assert number == str(line) and code == shown_code(kept.get(line, ""))
        assert gpu_time == format_duration(on_line[path, line])


@settings(deadline=None)  # a page of dozens of rows: slow on a busy machine
@given(sourced_profiles())
def test_every_kept_line_of_a_file_is_in_its_view_in_order(made):
    document, _ = made
    page = ParsedPage(render_profile_page(document))
    views = page.view_of_file()
    for path in PATHS:
        if printable(path) in views:
            view = views[printable(path)]
            numbers = [
                int(row.attributes["id"].split("-L")[1])
                for row in page.rows_of(view)
                if "id" in row.attributes
            ]
            kept = lines_of(document[SOURCES].get(path, []))
            assert numbers == sorted(set(numbers)) and set(kept) <= set(numbers)


@settings(deadline=None)  # a page of dozens of rows: slow on a busy machine
@given(sourced_profiles(lines=st.just("x = 1")))
def test_a_line_with_more_gpu_time_is_never_paler(made):
    document, chains = made
    page = ParsedPage(render_profile_page(document))
    views = page.view_of_file()
    shown = sorted(
        (gpu_ns, page.lines(views[printable(path)])[line].heat())
        for (path, line), gpu_ns in per_line(document, chains, "gpu_ns").items()
    )
    assert [level for _, level in shown] == sorted(level for _, level in shown)


def percents(cells: list[str]) -> float:
    """The sum of cells that read `12.3%`."""
    return sum(float(cell.removesuffix("%")) for cell in cells)


@settings(deadline=None)  # a page of dozens of rows: slow on a busy machine
@given(sourced_profiles())
def test_the_shares_add_up_to_the_whole_and_the_lines_to_the_sites_they_launched(made):
    document, chains = made
    page = ParsedPage(render_profile_page(document))
    total = document["total_gpu_ns"]
    ranking = page.sites("ranking")
    if not total:
        assert {row.text(2) for row in ranking} == {"-"}
        return
    # Each share is rounded to 0.1%: the sum is off by at most 0.05% a row.
    assert percents([row.text(2) for row in ranking]) == pytest.approx(
        100, abs=0.05 * len(ranking) + 1e-9
    )
    placed = sum(site["gpu_ns"] for site in document["sites"] if chains[site["name"]])
    lines = [row.titles[1] for view in page.view_of_file().values() for row in page.lines(view)
             .values() if row.titles[1]]  # fmt: skip
    assert percents(lines) == pytest.approx(100 * placed / total, abs=0.05 * len(lines) + 1e-9)


def test_a_document_without_source_shows_its_lines_by_number():
    page = render_profile_page(document_of({"step app.py:12": 3_000, "main app.py:40": 1_000}))
    parsed = ParsedPage(page)
    assert "the source of this file was not kept" in page
    assert [r.attributes["id"] for r in parsed.rows_of("f1") if "id" in r.attributes] == [
        "f1-L12",
        "f1-L40",
    ]


def test_a_path_with_spaces_is_found_where_its_source_is_kept():
    document = document_of({"step my dir/app.py:3": 1_000})
    kept = document | {SOURCES: {"my dir/app.py": [{"first": 3, "lines": ["go()"]}]}}
    assert ParsedPage(render_profile_page(kept)).sites("ranking")[0].links == ["#f1-L3"]
    # Without it, the last word before the colon is taken as the path.
    assert "<h2>dir/app.py</h2>" in render_profile_page(document)


# --- the call tree --------------------------------------------------------------------------


def test_the_tree_is_drawn_only_when_names_carry_callers():
    flat = render_profile_page(document_of({"step app.py:12": 3_000}))
    deep = render_profile_page(document_of({"step app.py:12 < main app.py:40": 3_000}))
    assert 'id="tree"' not in flat and 'href="#tree"' not in flat
    assert 'id="tree"' in deep and 'href="#tree"' in deep


def test_every_frame_of_a_chain_has_its_line_in_the_source_view():
    name = "inner app.py:12 < middle lib/ops.py:7 < outer app.py:40"
    page = ParsedPage(render_profile_page(document_of({name: 3_000})))
    assert [frame["a-href"] for frame in page.frames] == ["#f1-L40", "#f2-L7", "#f1-L12"]
    assert {"f1-L12", "f1-L40", "f2-L7"} <= set(page.ids)


# --- hostile input --------------------------------------------------------------------------

hostile_sources = st.dictionaries(
    hostile_names,
    st.lists(
        st.fixed_dictionaries({"first": st.integers(1, 5), "lines": st.lists(hostile_names)}),
        max_size=1,
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(hostile_documents, sourced_profiles().map(lambda made: made[0])), hostile_sources)
def test_hostile_names_paths_and_source_never_leave_their_escaping(document, sources):
    document = document | {SOURCES: {**document.get(SOURCES, {}), **sources}}
    page = render_profile_page(document)
    page.encode("utf-8")  # no lone surrogate
    assert all(c.isprintable() or c in "\n\t" for c in page)
    parsed = ParsedPage(page)
    assert set(parsed.tags) <= TAGS
    assert {name for name, _ in parsed.attributes} <= ATTRIBUTES
    assert not [chunk for chunk in parsed.raw_text if "<" in chunk or ">" in chunk]


@given(st.one_of(documents, sourced_profiles().map(lambda made: made[0])))
def test_the_page_loads_nothing_from_elsewhere(document):
    page = render_profile_page(document)
    parsed = ParsedPage(page)
    assert not {"script", "link", "img", "iframe", "object"} & set(parsed.tags)
    assert not [name for name, _ in parsed.attributes if name in ("src", "srcset")]
    assert all(href.startswith("#") for href in parsed.hrefs)
    assert "http:" not in page and "https:" not in page and "url(" not in page


# --- the recorded H200 profile --------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 3])
def test_the_recorded_h200_page_has_every_site_at_its_line_of_the_demo(depth):
    document = h200_document(depth)
    page = ParsedPage(render_profile_page(document))
    kept = lines_of(document[SOURCES]["profile_demo.py"])
    rows = {row.attributes.get("id"): row for row in page.rows}
    for row in page.sites("ranking"):
        line = int(row.attributes["data-site"].split(" < ")[0].rsplit(":", 1)[1])
        assert row.links[0] == f"#f1-L{line}"
        assert rows[f"f1-L{line}"].cells[3][1] == kept[line]
        assert "# site: " in kept[line]  # the demo marks each line it launches from
    assert ("tree" in page.views) == (depth > 1)
