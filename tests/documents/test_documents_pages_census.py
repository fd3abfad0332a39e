"""A launch census's page (kname.documents.pages.census): the ranking by launches, each line's
launches and kernels beside its source, and the tree, parsed back with html.parser."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_pages import ATTRIBUTES, TAGS, ParsedPage, per_line, shown_code, sourced_censuses
from support.profile_streams import census_of, hostile_names

from kname.documents.merge import merge_documents
from kname.documents.pages import render_page
from kname.documents.pages.census import render_census_page
from kname.documents.schema import RANKS
from kname.documents.sources import SOURCES, lines_of
from kname.documents.text import printable
from kname.ranks import Rank, meta


@settings(deadline=None)
@given(sourced_censuses())
def test_each_site_and_kernel_has_its_row_linked_to_its_line(made):
    document, chains = made
    page = ParsedPage(render_census_page(document))
    rows = page.sites("ranking")
    expected = sorted(document["sites"], key=lambda s: (-s["launches"], s["order"]))
    assert [(r.attributes["data-site"], int(r.cells[3][1])) for r in rows] == [
        (s["name"], s["launches"]) for s in expected
    ]
    views = page.view_of_file()
    for row in rows:
        _, path, line = chains[row.attributes["data-site"]][0]
        assert row.links == [f"#{views[printable(path)]}-L{line}"]
    assert {href[1:] for href in page.hrefs} <= set(page.ids)


@settings(deadline=None)
@given(sourced_censuses())
def test_each_line_shows_its_launches_beside_its_source_more_launches_never_paler(made):
    document, chains = made
    page = ParsedPage(render_census_page(document))
    views = page.view_of_file()
    shown = []
    for (path, line), launches in per_line(document, chains, "launches").items():
        _number, count, code, _kernels = page.lines(views[printable(path)])[line].cells
        assert int(count[1]) == launches
        assert code[1] == shown_code(lines_of(document[SOURCES].get(path, [])).get(line, ""))
        shown.append((launches, page.lines(views[printable(path)])[line].heat()))
    shown.sort()
    assert [level for _, level in shown] == sorted(level for _, level in shown)


@settings(deadline=None)
@given(sourced_censuses())
def test_the_shares_of_launches_add_up_to_the_whole_on_the_ranking_and_on_the_lines(made):
    document, _ = made
    page = ParsedPage(render_census_page(document))
    shares = [row.text(4) for row in page.sites("ranking")]
    lines = [row.titles[1] for view in page.view_of_file().values()
             for row in page.lines(view).values() if row.titles[1]]  # fmt: skip
    for cells in (shares, lines):
        # Each share is rounded to 0.1%: the sum is off by at most 0.05% a row.
        total = sum(float(cell.removesuffix("%")) for cell in cells)
        assert total == pytest.approx(100, abs=0.05 * len(cells) + 1e-9)


def test_a_census_of_call_chains_has_its_tree_by_launches():
    document = census_of({("inner app.py:3 < main app.py:9", "axpy"): 6,
                          ("other app.py:5 < main app.py:9", "scale"): 2})  # fmt: skip
    page = ParsedPage(render_page(document))
    assert [(f["a-title"], f["data-value"]) for f in page.frames] == [
        ("main app.py:9: 8 launches (100.0%)", "8"),
        ("inner app.py:3: 6 launches (75.0%)", "6"),
        ("other app.py:5: 2 launches (25.0%)", "2"),
    ]


@settings(deadline=None)
@given(st.dictionaries(st.tuples(hostile_names, hostile_names), st.integers(1, 99), max_size=5))
def test_hostile_names_and_kernels_never_leave_their_escaping(counts):
    page = render_census_page(census_of(counts))
    page.encode("utf-8")
    parsed = ParsedPage(page)
    assert set(parsed.tags) <= TAGS and {name for name, _ in parsed.attributes} <= ATTRIBUTES
    assert not [chunk for chunk in parsed.raw_text if "<" in chunk or ">" in chunk]


def test_a_census_of_several_ranks_shows_each_sites_launches_across_them_and_its_slowest():
    """`kname report census.rank*.json --html`: the ranks' numbers, as the text table has them."""
    parts = []
    for rank, steps in enumerate([3, 3, 3, 9]):
        part = census_of({("step app.py:12", "axpy"): steps, ("main app.py:30", "scale"): 1})
        parts.append({**part, RANKS: [meta(Rank(rank, rank, 4, "slurm"), pid=rank)]})
    page = ParsedPage(render_census_page(merge_documents(parts)))
    rows = {row.attributes["data-site"]: row for row in page.sites("ranking")}
    assert [cell for _, cell in rows["step app.py:12"].cells[5:]] == ["3 / 3 / 9", "rank 3"]
    assert [cell for _, cell in rows["main app.py:30"].cells[5:]] == ["1 / 1 / 1", "all equal"]
    headers = [cell for _, cell in page.rows_of("ranking")[0].cells]
    assert headers[5:] == ["across ranks:min / median / max", "slowest"]
    assert "across ranks" not in render_census_page(parts[0])  # one rank: no spread
