"""The pages laid out by a real browser: headless Chromium, where one is installed.

Each page is made from the profile recorded on the H200 (tests/support/recorded_pages.py). A copy
of it
gets a script (the page itself has none) that reports, once the page has loaded, what the
browser shows: which views are displayed, where the linked line is, how wide the page is, which
links find no element. The screenshots for the README (docs/make_screenshots.py) are made too.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys

import pytest
from support import REPO
from support.recorded_pages import h200_census, h200_document, h200_halves

from kname.documents.diff import Comparison
from kname.documents.merge import merge_documents
from kname.documents.pages import render_page
from kname.documents.pages.diff import render_diff_page
from kname.ranks import Rank, meta

CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here")

# Run after the page has loaded and followed its link (and, if asked, clicked one): what is
# shown, in the title, as JSON.
REPORT = """<script>
window.addEventListener("load", () => setTimeout(() => {
  const click = %s;
  if (click) document.querySelector(click).click();
  setTimeout(() => {
    const target = location.hash ? document.getElementById(location.hash.slice(1)) : null;
    const box = target ? target.getBoundingClientRect() : null;
    document.title = JSON.stringify({
      views: [...document.querySelectorAll("section.view")]
        .filter(view => getComputedStyle(view).display !== "none").map(view => view.id),
      hash: location.hash,
      links: document.querySelectorAll("a[href]").length,
      broken_links: [...document.querySelectorAll("a[href]")].map(a => a.getAttribute("href"))
        .filter(href => !href.startsWith("#") || !document.getElementById(href.slice(1))),
      target_in_window: box ? box.top >= 0 && box.bottom <= innerHeight : null,
      below_the_bar: box ? box.top >= document.querySelector("nav").getBoundingClientRect().bottom
        : null,
      scroll_width: document.documentElement.scrollWidth,
      window_width: document.documentElement.clientWidth,
    });
  }, 200);
}, 100));
</script>"""


def browse(tmp_path, page: str, fragment: str = "", click: str = "", width: int = 1100) -> dict:
    """What Chromium shows of `page` opened at `fragment` (after clicking `click`)."""
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", REPORT % json.dumps(click) + "</body>"), "utf-8")
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},800",
         "--virtual-time-budget=3000", "--dump-dom", path.as_uri() + fragment],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    title = re.search(r"<title>(\{.*\})</title>", done.stdout)
    assert title, done.stderr[-2000:]
    return json.loads(title.group(1).replace("&quot;", '"'))


@pytest.fixture(scope="module")
def deep_page() -> str:
    return render_page(h200_document(depth=3))


@pytest.mark.parametrize(
    ("fragment", "views"),
    [("", ["ranking"]), ("#files", ["files"]), ("#f1-L105", ["f1"]), ("#tree", ["tree"])],
)
@pytest.mark.parametrize("width", [800, 1100])
def test_a_link_shows_its_view_alone_with_its_line_in_the_window_below_the_bar(
    tmp_path, deep_page, fragment, views, width
):
    """The navigation bar stays at the top: what a link goes to is not under it."""
    shown = browse(tmp_path, deep_page, fragment, width=width)
    assert shown["views"] == views
    assert shown["target_in_window"] in (None, True)
    assert shown["below_the_bar"] in (None, True)


@pytest.mark.parametrize(
    ("click", "hash"),
    [
        ("tr[data-site] a", "#f1-L132"),  # the hottest site: its line
        ("nav a[href='#tree']", "#tree"),
        (".icicle .kids .kids .kids a", "#f1-L132"),  # its frame in the tree
    ],
)
def test_clicking_a_row_or_a_frame_goes_to_its_line(tmp_path, deep_page, click, hash):
    shown = browse(tmp_path, deep_page, click=click)
    assert shown["hash"] == hash and shown["target_in_window"] and shown["below_the_bar"]
    assert shown["views"] == ["f1" if hash.startswith("#f1") else "tree"]


@pytest.fixture(scope="module")
def pages(deep_page) -> dict[str, str]:
    """Every kind of page, made from the recording (names three frames deep)."""
    first, second = h200_halves()
    return {
        "profile": deep_page,
        "census": render_page(h200_census(depth=3)),
        "diff": render_diff_page(Comparison(first, second, ("a.json", "b.json"))),
    }


def h200_ranks(depth: int) -> list[dict]:
    """The recording as four ranks' files, rank 2 having run it twice: the ranking's spread."""
    document = h200_document(depth)
    return [
        {**document, "ranks": [meta(Rank(rank, rank, 4, "torchrun"), host="n", pid=run)]}
        for rank in range(4)
        for run in range(2 if rank == 2 else 1)
    ]


@pytest.mark.parametrize("kind", ["profile", "census", "diff"])
def test_every_link_of_every_page_goes_to_an_element_the_browser_finds(tmp_path, pages, kind):
    shown = browse(tmp_path, pages[kind])
    assert shown["links"] > 20 and shown["broken_links"] == []


@pytest.mark.parametrize("width", [800, 1100])
@pytest.mark.parametrize(
    ("kind", "fragment"),
    [("profile", ""), ("profile", "#f1"), ("profile", "#tree"), ("census", ""),
     ("census", "#f1"), ("census", "#tree"), ("diff", ""), ("diff", "#f1")],
)  # fmt: skip
def test_the_recorded_h200_pages_fit_the_window_with_no_sideways_scrolling(
    tmp_path, pages, kind, fragment, width
):
    """Its kernel names are 80 characters long, its names three frames: they wrap."""
    shown = browse(tmp_path, pages[kind], fragment, width=width)
    assert shown["views"] == [fragment[1:] or ("changes" if kind == "diff" else "ranking")]
    assert shown["scroll_width"] <= shown["window_width"]


def test_a_census_page_opens_at_its_ranking_and_a_row_goes_to_its_line(tmp_path, pages):
    shown = browse(tmp_path, pages["census"], click="tr[data-site] a")
    assert shown["views"] == ["f1"] and shown["hash"].startswith("#f1-L")
    assert shown["target_in_window"]


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_the_screenshots_are_made_at_their_sizes(tmp_path):
    done = subprocess.run(
        [sys.executable, str(REPO / "docs" / "make_screenshots.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(REPO / "docs"))
    try:
        from make_screenshots import SHOTS
    finally:
        sys.path.remove(str(REPO / "docs"))
    for shot in SHOTS:
        assert png_size(tmp_path / shot.file) == shot.size
        assert (REPO / "docs" / shot.file).exists(), f"docs/{shot.file} is not in the repository"
        assert f"]({shot.file})" in (REPO / "docs" / "pages.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("width", [800, 1100])
@pytest.mark.parametrize("kind", ["profile", "census"])
def test_the_ranking_of_a_jobs_ranks_fits_the_window(tmp_path, kind, width):
    """Two more columns, each line's spread and slowest rank, fit as the others do."""
    documents = h200_ranks(depth=3)
    if kind == "census":
        documents = [{**h200_census(depth=3), "ranks": d["ranks"]} for d in documents]
    page = render_page(merge_documents(documents))
    shown = browse(tmp_path, page, width=width)
    assert shown["views"] == ["ranking"]
    assert shown["scroll_width"] <= shown["window_width"]
