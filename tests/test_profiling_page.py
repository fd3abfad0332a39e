"""The HTML page: parsed back with html.parser, its bars and table checked against the data.

The page must stand alone: no script, nothing loaded from elsewhere (no src, no href, no URL).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from profile_streams import documents

from kname.documents.build import profile_document
from kname.documents.tables import graph_note
from kname.profiling.join import KernelTotals, Profile, SiteTotals, replay
from kname.profiling.page import BAR_WIDTH, BARS_SHOWN, render_page
from kname.profiling.records import load_streams


class Page(HTMLParser):
    """What a test needs from the page: bars, table rows, tags and attributes seen."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.bars: list[dict] = []  # {"site", "gpu_ns", "width"}
        self.rows: list[dict] = []  # {"site", "cells": [...]}
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append(tag)
        self.attributes += [(k, v or "") for k, v in attrs]
        if tag == "g" and attributes.get("class") == "bar":
            self.bars.append(
                {"site": attributes["data-site"], "gpu_ns": int(attributes["data-gpu-ns"])}
            )
        elif tag == "rect" and self.bars:
            self.bars[-1]["width"] = float(attributes["width"])
        elif tag == "tr" and "data-site" in attributes:
            self.rows.append({"site": attributes["data-site"], "cells": []})
        elif tag == "td" and self.rows:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[-1]["cells"].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def document_of(times: dict[str, int]) -> dict:
    sites = {
        name: SiteTotals(3, gpu_ns, rank, {"_Z9scale_rawPfi": KernelTotals(3, gpu_ns)})
        for rank, (name, gpu_ns) in enumerate(times.items(), 1)
    }
    return profile_document(Profile(sites, SiteTotals()))


@given(documents)
def test_bars_are_as_long_as_their_gpu_time_and_in_rank_order(document):
    page = Page(render_page(document))
    sites = document["sites"][:BARS_SHOWN]
    assert [(b["site"], b["gpu_ns"]) for b in page.bars] == [
        (s["name"], s["gpu_ns"]) for s in sites
    ]
    longest = max((s["gpu_ns"] for s in sites), default=0)
    for bar in page.bars:
        expected = BAR_WIDTH * bar["gpu_ns"] / longest if longest else 0
        # Written to one decimal: off by at most half of 0.1 (and a float's last bit).
        assert bar["width"] == pytest.approx(expected, abs=0.05 + 1e-9)


@given(documents)
def test_the_table_has_every_site_with_its_numbers(document):
    page = Page(render_page(document))
    assert [row["site"] for row in page.rows] == [site["name"] for site in document["sites"]]
    for row, site in zip(page.rows, document["sites"], strict=True):
        name, _time, _share, launches, _mean, kernels = row["cells"]
        note = graph_note(site, text=str).strip().removeprefix("(").removesuffix(")")
        assert name == site["name"] + note and int(launches) == site["launches"]
        assert kernels.count(":") >= len(site["kernels"])


def test_a_site_of_graph_work_shows_the_lines_that_replayed_it_beneath_its_own():
    made = SiteTotals(50, 183_000, 1, {"gemm": KernelTotals(50, 183_000)})
    made.replays["step runner.py:26"] = KernelTotals(50, 183_000)
    replay_line = SiteTotals(4, 900, 2, {"add": KernelTotals(4, 900)}, unseen=KernelTotals(4, 900))
    page = render_page(
        profile_document(
            Profile(
                {"y = x * 2.0  model.py:21": made, "step runner.py:40": replay_line}, SiteTotals()
            )
        )
    )
    assert (
        '<td class="site">y = x * 2.0  model.py:21'
        '<div class="graph">graph replayed at step runner.py:26</div></td>'
    ) in page
    assert '<div class="graph">graph replayed here, its capture not seen</div>' in page


@given(documents)
def test_the_page_loads_nothing_from_elsewhere(document):
    text = render_page(document)
    page = Page(text)
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert not [name for name, _ in page.attributes if name in ("src", "href")]
    assert "http:" not in text and "https:" not in text and "url(" not in text


def test_names_are_escaped_and_read_back_exactly():
    name = 'f<b>&"x" app.py:1'
    page = Page(render_page(document_of({name: 10_000, "g app.py:2": 5_000})))
    assert [bar["site"] for bar in page.bars] == [name, "g app.py:2"]
    assert page.rows[0]["cells"][0] == name
    assert [bar["width"] for bar in page.bars] == [BAR_WIDTH, BAR_WIDTH / 2]
    assert page.rows[0]["cells"][1:5] == ["10.0 us", "66.7%", "3", "3.33 us"]
    assert page.rows[0]["cells"][5] == "scale_raw: 10.0 us (3)"
    assert "b" not in page.tags


def test_unattributed_work_is_a_warning_on_the_page():
    document = document_of({"s app.py:1": 1_000})
    document["unattributed"] = {"launches": 2, "gpu_ns": 40, "kernels": {}}
    assert "2 GPU records (40 ns) could not be attributed" in render_page(document)


# --- the page laid out by a browser ---------------------------------------------------------

FIXTURE = Path(__file__).parent / "data" / "profile_h200.json"
CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
# Added to a copy of the page only (the page itself has no script): the widths in the title.
MEASURE = (
    "<script>document.title = document.documentElement.scrollWidth + ' ' + "
    "document.documentElement.clientWidth;</script>"
)


def test_the_chart_scales_to_the_window():
    page = render_page(document_of({"s app.py:1": 1_000}))
    width, height = re.search(r'<svg class="chart" width="(\d+)" height="(\d+)"', page).groups()
    assert f'viewBox="0 0 {width} {height}"' in page
    assert re.search(r"svg\.chart \{[^}]*max-width: 100%", page)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here to lay the page out")
@pytest.mark.parametrize("window", [800, 1100])
def test_the_recorded_h200_page_fits_the_window_with_no_sideways_scrolling(tmp_path, window):
    """The H200 fixture has 80-character kernel names: they wrap; the table and chart fit."""
    page = render_page(profile_document(replay(load_streams(str(FIXTURE)))))
    measured = tmp_path / "page.html"
    measured.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={window},800", "--dump-dom",
         measured.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    widths = re.search(r"<title>(\d+) (\d+)</title>", done.stdout)
    assert widths, done.stderr[-2000:]
    scroll_width, window_width = map(int, widths.groups())
    assert scroll_width <= window_width


def test_a_merged_profile_of_several_ranks_shows_each_lines_spread() -> None:
    from kname.documents.merge import merge_documents
    from kname.ranks import Rank, meta

    parts = []
    for rank, gpu_ns in enumerate([2_000, 3_000, 9_000]):
        part = document_of({"step app.py:12": gpu_ns, "save app.py:30": 500 if rank else 0})
        parts.append({**part, "ranks": [meta(Rank(rank, rank, 3, "slurm"), pid=rank)]})
    text = render_page(merge_documents(parts))
    page = Page(text)
    (step,) = [row for row in page.rows if row["site"] == "step app.py:12"]
    assert step["cells"][5:7] == ["2.00 us / 3.00 us / 9.00 us", "rank 2"]
    spreads = re.findall(r'data-min-ns="(\d+)" data-median-ns="(\d+)" data-max-ns="(\d+)"', text)
    assert spreads == [("2000", "3000", "9000"), ("0", "500", "500")]
    assert "<th>across ranks: min / median / max</th>" in text
    assert "across ranks" not in render_page(parts[0])  # one rank: no spread
