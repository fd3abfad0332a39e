"""A page (kname.documents.pages) read back with html.parser, for the page tests.

Character references are kept apart from the raw text, so a test can tell an escaped `&lt;`
from a `<` that data brought in unescaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser

from hypothesis import strategies as st

from kname.documents.build import census_document, profile_document
from kname.documents.sources import SOURCES
from kname.documents.text import printable
from kname.naming import CALLER_SEPARATOR
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from support.profile_streams import TERMINAL_HOSTILE

# Every tag and attribute a page writes: data that got out of its escaping makes others.
TAGS = {
    "html", "head", "meta", "title", "style", "body", "nav", "a", "h1", "h2", "p", "section",
    "table", "tr", "th", "td", "span", "div", "ul", "li", "svg", "g", "text", "rect", "br",
    "line", "h3", "polyline", "circle",
}  # fmt: skip
ATTRIBUTES = {
    "lang", "charset", "name", "content", "href", "id", "class", "title", "style", "colspan",
    "data-site", "data-gpu-ns", "data-value", "data-change", "width", "height", "viewbox", "role",
    "aria-label", "x", "y", "text-anchor", "x1", "y1", "x2", "y2", "data-min-ns",
    "data-median-ns", "data-max-ns", "points", "cx", "cy", "r", "data-view", "data-peak-bytes",
    "data-peak-ns",
    "data-verdict", "data-launch-cpu-ns", "data-launch-calls", "data-idle-ns",
}  # fmt: skip
HEAT = re.compile(r"\bh([1-6])\b")


def shown_code(line: str) -> str:
    """A line of source as a page shows it: tabs kept, other unprintable characters escaped."""
    return "\t".join(printable(part) for part in line.split("\t"))


@dataclass
class Row:
    """A table row: its attributes, and each cell's class and text."""

    attributes: dict[str, str]
    view: str  # the id of the view it is in
    cells: list[tuple[str, str]] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)  # each cell's title ("" for none)
    links: list[str] = field(default_factory=list)  # the hrefs in it

    def text(self, index: int) -> str:
        return self.cells[index][1]

    def heat(self) -> int:
        """The heat level of its first heated cell (0: none)."""
        for classes, _ in self.cells:
            match = HEAT.search(classes)
            if match:
                return int(match.group(1))
        return 0


class ParsedPage(HTMLParser):
    """Tags, attributes, anchors, links, views, rows and the raw text of a page."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=False)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.views: list[str] = []
        self.rows: list[Row] = []
        self.raw_text: list[str] = []  # what data came as, references left out
        # The call tree's boxes: the node's and its frame's (`a-...`) attributes, and the value of
        # the node it is drawn in (`parent`, "" for a root).
        self.frames: list[dict[str, str]] = []
        self._divs: list[dict[str, str]] = []
        self.headings: dict[str, str] = {}  # view -> the text of its <h2>
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self._in_row = False
        self._node: dict[str, str] | None = None
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        attributes = {name: value or "" for name, value in attrs}
        self.tags.append(tag)
        self.attributes += attributes.items()
        if "id" in attributes:
            self.ids.append(attributes["id"])
        if "href" in attributes:
            self.hrefs.append(attributes["href"])
            if self._in_row:
                self.rows[-1].links.append(attributes["href"])
        if tag == "section":
            self.views.append(attributes["id"])
        elif tag == "h2":
            self._heading = []
        elif tag == "tr":
            self.rows.append(Row(attributes, self.views[-1] if self.views else ""))
            self._in_row = True
        elif tag in ("td", "th") and self.rows:
            self.rows[-1].cells.append((attributes.get("class", ""), ""))
            self.rows[-1].titles.append(attributes.get("title", ""))
            self._cell = []
        elif tag == "div":
            if attributes.get("class") == "node":
                nodes = [div for div in self._divs if div.get("class") == "node"]
                parent = nodes[-1]["data-value"] if nodes else ""
                self._node = attributes | {"parent": parent}
            self._divs.append(attributes)
        elif tag == "a" and "frame" in attributes.get("class", "") and self._node is not None:
            self.frames.append({**self._node, **{f"a-{k}": v for k, v in attributes.items()}})
            self._node = None

    def handle_endtag(self, tag):
        if tag == "div" and self._divs:
            self._divs.pop()
        if tag == "tr":
            self._in_row = False
        elif tag == "h2" and self._heading is not None:
            self.headings[self.views[-1]] = "".join(self._heading)
            self._heading = None
        if tag in ("td", "th") and self._cell is not None:
            classes, _ = self.rows[-1].cells[-1]
            self.rows[-1].cells[-1] = (classes, "".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        self.raw_text.append(data)
        self._text(data)

    def handle_entityref(self, name):
        self._text(unescape(f"&{name};"))

    def handle_charref(self, name):
        self._text(unescape(f"&#{name};"))

    def _text(self, text: str) -> None:
        for into in (self._cell, self._heading):
            if into is not None:
                into.append(text)

    def view_of_file(self) -> dict[str, str]:
        """{path as the page shows it: the id of its source view}."""
        return {heading: view for view, heading in self.headings.items() if view[1:].isdigit()}

    def lines(self, view: str) -> dict[int, Row]:
        """The numbered rows of a file's view, by line number."""
        return {
            int(row.attributes["id"].split("-L")[1]): row
            for row in self.rows_of(view)
            if row.attributes.get("id", "").startswith(view + "-L")
        }

    def rows_of(self, view: str) -> list[Row]:
        return [row for row in self.rows if row.view == view]

    def sites(self, view: str) -> list[Row]:
        """The rows of `view` that stand for a call site."""
        return [row for row in self.rows_of(view) if "data-site" in row.attributes]


# --- documents with source ------------------------------------------------------------------

# Two paths hold a space: a name points at them only where the document keeps their source.
PATHS = ("app.py", "pkg/ops.py", "naïve/ünïcode.py", "my dir/solver.py", "<cell 3>")
SPACED = tuple(path for path in PATHS if " " in path)
FUNCTIONS = ("step", "main", "Solver.run", "<module>", "<lambda>")
KERNELS = ("axpy", "_Z9scale_rawPfi", "[memcpy HtoD]", "k<1>")
frames = st.tuples(st.sampled_from(FUNCTIONS), st.sampled_from(PATHS), st.integers(1, 40))
chains = st.lists(frames, min_size=1, max_size=4)
UNPLACED = ("<no Python frame>", "axpy <no user frame>")
source_lines = st.text(
    st.one_of(st.sampled_from("<>&\"' \t" + TERMINAL_HOSTILE), st.characters()), max_size=30
)


def name_of(chain: list[tuple[str, str, int]]) -> str:
    """The call-site name of a chain of (function, path, line), the site first."""
    return CALLER_SEPARATOR.join(f"{function} {path}:{line}" for function, path, line in chain)


def per_line(document: dict, chains: dict[str, list], field: str) -> dict[tuple[str, int], int]:
    """{(path, line): the sum of `field` ("gpu_ns", "launches")} of the lines the sites launched
    from, by the chains they were made of (a site with no chain names no line)."""
    lines: dict[tuple[str, int], int] = {}
    for site in document["sites"]:
        if chains[site["name"]]:
            _, path, line = chains[site["name"]][0]
            lines[path, line] = lines.get((path, line), 0) + site[field]
    return lines


@st.composite
def sourced(draw, document: dict, lines=source_lines) -> dict:
    """`document` with the source of some of its files (always of those with a space)."""
    sources = {}
    for path in PATHS:
        if path in SPACED or draw(st.booleans()):
            first = draw(st.integers(1, 12))
            sources[path] = [{"first": first, "lines": draw(st.lists(lines, max_size=40))}]
    return document | {SOURCES: sources}


@st.composite
def sourced_profiles(draw, lines=source_lines) -> tuple[dict, dict[str, list]]:
    """(a profile with source, {site name: its chain}); a few sites name no line."""
    chains_of = {name_of(c): c for c in draw(st.lists(chains, min_size=1, max_size=8))}
    for name in draw(st.lists(st.sampled_from(UNPLACED), max_size=2, unique=True)):
        chains_of[name] = []
    sites = {}
    for rank, name in enumerate(chains_of, 1):
        kernels = {
            kernel: KernelTotals(draw(st.integers(1, 40)), draw(st.integers(0, 10**8)))
            for kernel in draw(
                st.lists(st.sampled_from(KERNELS), min_size=1, max_size=3, unique=True)
            )
        }
        sites[name] = SiteTotals(
            sum(k.launches for k in kernels.values()),
            sum(k.gpu_ns for k in kernels.values()),
            rank,
            kernels,
        )
    document = profile_document(Profile(sites, SiteTotals()))
    return draw(sourced(document, lines)), chains_of


@st.composite
def sourced_censuses(draw) -> tuple[dict, dict[str, list]]:
    """(a census with source, {site name: its chain}), a site once per kernel."""
    chains_of = {name_of(c): c for c in draw(st.lists(chains, min_size=1, max_size=8))}
    rows = {
        (name, kernel, "numba"): draw(st.integers(1, 10**6))
        for name in chains_of
        for kernel in draw(st.lists(st.sampled_from(KERNELS), min_size=1, max_size=2, unique=True))
    }
    return draw(sourced(census_document(rows))), chains_of


def assert_no_injected_markup(page: str) -> None:
    """Every tag and attribute of `page` is one a page writes, and no text holds a `<`: markup
    from the data came out escaped (no script, no element, no attribute of its own)."""
    parsed = ParsedPage(page)
    assert set(parsed.tags) <= TAGS, set(parsed.tags) - TAGS
    assert {name for name, _ in parsed.attributes} <= ATTRIBUTES
    assert "<" not in "".join(parsed.raw_text)
