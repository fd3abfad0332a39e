"""A launch census's page (schema 1): the ranking by launches, a source view per file, the tree.

As a profile's page (pages/profile.py), with launches where a profile has GPU time: each line
of source shows how many launches it made, of which kernels, coloured by its share of all; a
merge of several ranks' files shows each site's launches across the ranks (pages/ranks.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kname.documents.kernel_names import display_name
from kname.documents.pages import ranks, source, tree
from kname.documents.pages.layout import (
    EMPTY,
    Html,
    View,
    heat,
    html,
    joined,
    percent,
    render,
    site_name,
)
from kname.documents.pages.source import CODE, SourceFiles, file_views, files_view, linked
from kname.documents.pages.titles import page_title
from kname.documents.spread import Spread, spreads
from kname.documents.tables import ranked_sites
from kname.documents.text import count_of

SOURCE_HEADERS = ("launches", CODE, "kernels")
# A kernel name (up to 80 characters without a space) may break anywhere, as on a profile's page.
STYLE = """
table.sites td.kernel { overflow-wrap: anywhere; }
"""


def render_census_page(document: Mapping[str, Any], title: str | None = None) -> str:
    """The page for a schema-1 document; `title` by default says of which run (titles.py)."""
    order = ranked_sites(document, "launches")
    sites = [document["sites"][index] for index in order]
    spread = spreads(document)
    across = [spread[index] for index in order] if spread else None
    total = document["total_launches"]
    files = SourceFiles((site["name"] for site in sites), [document])
    launches = per_line(sites, files)
    sums = {
        path: f"{count_of(sum(k.values()), 'launch')} ({percent(sum(k.values()), total)}) "
        f"from {count_of(len(k), 'kernel')} on its lines"
        for path, k in _per_file(launches).items()
    }
    views = [
        View("ranking", "ranking", _table(sites, total, files, across)),
        files_view(files, sums),
    ]
    views += file_views(files, _line_rows(launches, total), SOURCE_HEADERS, sums)
    if tree.has_callers(files):
        values: dict[str, int] = {}
        for site in sites:
            values[site["name"]] = values.get(site["name"], 0) + site["launches"]
        views.append(tree.tree_view(values, files, total, lambda n: count_of(n, "launch")))
    summary = (
        f"{count_of(total, 'launch')} from "
        f"{count_of(len({s['name'] for s in sites}), 'call site')} "
        f"(kname {document.get('kname', '?')})"
    )
    shown = page_title(document, "kname census") if title is None else title
    return render(shown, summary, views, STYLE + ranks.STYLE + source.STYLE + tree.STYLE)


def per_line(
    sites: list[Mapping[str, Any]], files: SourceFiles
) -> dict[tuple[str, int], dict[str, int]]:
    """{(path, line): {kernel: launches}} of the lines the sites launched from."""
    lines: dict[tuple[str, int], dict[str, int]] = {}
    for site in sites:
        frame = files.chains[site["name"]][0]
        if frame.path:
            kernels = lines.setdefault((frame.path, frame.line), {})
            kernels[site["kernel"]] = kernels.get(site["kernel"], 0) + site["launches"]
    return lines


def _per_file(lines: Mapping[tuple[str, int], dict[str, int]]) -> dict[str, dict[str, int]]:
    files: dict[str, dict[str, int]] = {}
    for (path, _line), kernels in lines.items():
        counted = files.setdefault(path, {})
        for kernel, launches in kernels.items():
            counted[kernel] = counted.get(kernel, 0) + launches
    return files


def _table(
    sites: list[Mapping[str, Any]],
    total: int,
    files: SourceFiles,
    spread: list[Spread] | None = None,
) -> Html:
    """The ranking table; with `spread` (each site's, in the same order), its launches across
    ranks."""
    widest = max((s.high for s in spread), default=0) if spread else 0
    rows = [
        html(
            '<table class="sites">\n<tr><th>call site</th><th>kernel</th><th>library</th>'
            "<th>launches</th><th>share</th>{across}</tr>",
            across=ranks.HEADERS if spread else EMPTY,
        ),
        *(
            html(
                '<tr data-site="{name}"><td class="site">{link}</td>'
                '<td class="kernel">{kernel}</td><td>{lib}</td>'
                '<td class="number {heat}">{launches}</td><td class="number">{share}</td>'
                "{across}</tr>",
                name=site["name"],
                link=linked(site_name(site["name"]), files.site_link(site["name"])),
                kernel=display_name(site["kernel"]) or "?",
                lib=site["lib"] or "?",
                heat=heat(site["launches"] / total if total else 0),
                launches=site["launches"],
                share=percent(site["launches"], total),
                across=ranks.spread_cells(spread[index], widest, _count) if spread else EMPTY,
            )
            for index, site in enumerate(sites)
        ),
        Html("</table>"),
    ]
    return joined(rows, "\n")


def _count(launches: float) -> str:
    """A number of launches, or a median of them (`2.5`), as the spread shows it."""
    return f"{launches:.12g}"


def _line_rows(
    lines: Mapping[tuple[str, int], dict[str, int]], total: int
) -> dict[tuple[str, int], list[Html]]:
    rows = {}
    for place, kernels in lines.items():
        launches = sum(kernels.values())
        ranked = sorted(kernels, key=lambda kernel: -kernels[kernel])
        shown = ", ".join(f"{display_name(k) or '?'} ({kernels[k]})" for k in ranked)
        rows[place] = [
            html(
                '<td class="number {heat}" title="{share}">{launches}</td>',
                heat=heat(launches / total if total else 0),
                share=percent(launches, total),
                launches=launches,
            ),
            html('<td class="kernels" title="{shown}">{shown}</td>', shown=shown),
        ]
    return rows
