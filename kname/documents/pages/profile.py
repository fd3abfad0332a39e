"""A GPU profile's page (schema 2): the ranking, a source view per file, and the call tree.

The ranking is a bar chart of GPU time by call site (inline SVG) and the table, one row per
site (`site_row`), its name a link to its line. Each file's view shows every line's GPU time,
launches and kernels beside the source, the time coloured by its share of the total. The call
tree is drawn when names carry callers (KNAME_DEPTH above 1). Each bar carries its data
(`data-site`, `data-gpu-ns`), and each row its site (`data-site`), for tests and for anyone
reading the source. A site with CUDA graph work says beneath its name which lines replayed its
graph (`<div class="graph">`, as the table's note says it); one whose launches were timed, their
CPU time per call, the GPU idle they left and its launch-bound verdict (`<div class="verdict">`).

A merged document of several ranks shows, in the ranking, each line's spread across them
(documents/spread.py): the least, median and most GPU time of one rank, drawn as a range with the
median marked (`data-min-ns`, `data-median-ns`, `data-max-ns`), and the slowest rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kname.documents import backward_lines
from kname.documents.kernel_names import display_name
from kname.documents.memory import has_memory
from kname.documents.pages import memory, ranks, source, tree
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
from kname.documents.pages.memory import memory_cell, memory_section
from kname.documents.pages.source import CODE, SourceFiles, file_views, files_view, linked
from kname.documents.pages.titles import page_title
from kname.documents.spread import Spread, spreads
from kname.documents.tables import graph_note, ranked_sites
from kname.documents.text import count_of, format_duration
from kname.documents.verdict import per_launch, site_advice, site_times, site_verdict

BARS_SHOWN = 40
BAR_WIDTH = 600  # px, the longest bar
ROW_HEIGHT = 22
LABEL_WIDTH = 360
KERNELS_SHOWN = 3  # on a line of source; the ranking lists them all

# The chart scales down to the window, and a kernel name (up to 80 characters without a space)
# may break anywhere; call sites, times and headings stay on one line.
STYLE = """
svg.chart { max-width: 100%; height: auto; }
svg text { font: 12px ui-monospace, monospace; fill: #222; }
svg .value { fill: #555; }
svg rect { fill: #4e79a7; }
td.site .graph { color: #555; font-size: 0.9em; white-space: normal; }
td.site .verdict { color: #555; font-size: 0.9em; white-space: normal; }
td.site .verdict[data-verdict="launch-bound"] { color: #b03a2e; }
ul.kernels { margin: 0; padding-left: 1.2em; }
ul.kernels .kernel { overflow-wrap: anywhere; }
ul.kernels .time { white-space: nowrap; }
"""
SOURCE_HEADERS = ("GPU time", "launches", CODE, "kernels")
MEMORY_SOURCE_HEADERS = ("GPU time", "launches", "memory", CODE, "kernels")  # with --memory


def render_profile_page(document: Mapping[str, Any], title: str | None = None) -> str:
    """The page for a schema-2 document; `title` by default says of which run (titles.py)."""
    order = ranked_sites(document, "gpu_ns")
    sites = [document["sites"][index] for index in order]
    spread = spreads(document)
    total = document["total_gpu_ns"]
    files = SourceFiles((site["name"] for site in sites), [document])
    summary = (
        f"{format_duration(total)} of GPU time in "
        f"{count_of(document['total_launches'], 'launch')} from "
        f"{count_of(len(sites), 'call site')} (kname {document.get('kname', '?')})"
    )
    across = [spread[index] for index in order] if spread else None
    ranking = [
        _unattributed(document),
        _chart(sites[:BARS_SHOWN]),
        _table(sites, total, files, across),
        memory_section(document),
    ]
    sums = _file_sums(sites, total, files)
    views = [
        View("ranking", "ranking", joined(filter(None, ranking), "\n")),
        files_view(files, sums),
    ]
    rows, headers = _line_rows(sites, total, files), SOURCE_HEADERS
    if has_memory(document):
        rows, headers = _with_memory_cells(rows, sites, files), MEMORY_SOURCE_HEADERS
    if backward_lines.shows_backward(sites):  # each line's backward time beside its GPU time
        rows = _with_backward_cells(rows, sites, files)
        headers = (headers[0], backward_lines.HEADER, *headers[1:])
    views += file_views(files, rows, headers, sums)
    if tree.has_callers(files):
        values = {site["name"]: site["gpu_ns"] for site in sites}
        views.append(tree.tree_view(values, files, total, format_duration))
    shown = page_title(document, "kname profile") if title is None else title
    styles = STYLE + ranks.STYLE + source.STYLE + tree.STYLE + memory.STYLE
    return render(shown, summary, views, styles)


def site_row(
    site: Mapping[str, Any], total: int, href: str | None, spread_cells: Html = EMPTY
) -> Html:
    """One site's row of the ranking table, its name a link to its line (`href`), with its
    cells across ranks (`spread_cells`) before its kernels."""
    launches = site["launches"]
    kernels = joined(
        html(
            '<li title="{name}"><span class="kernel">{shown}</span>: '
            '<span class="time">{time} ({launches})</span></li>',
            name=name,
            shown=display_name(name),
            time=format_duration(k["gpu_ns"]),
            launches=k["launches"],
        )
        for name, k in site["kernels"].items()
    )
    note = graph_note(site, text=str).strip().removeprefix("(").removesuffix(")")
    if backward_lines.BACKWARD_NS in site:
        backward = f"backward {format_duration(site[backward_lines.BACKWARD_NS])}"
        note = f"{note}; {backward}" if note else backward
    return html(
        '<tr data-site="{name}"><td class="site">{link}{graph}{verdict}</td>'
        '<td class="number {heat}">{time}</td><td class="number">{share}</td>'
        '<td class="number">{launches}</td><td class="number">{mean}</td>'
        '{spread_cells}<td><ul class="kernels">{kernels}</ul></td></tr>',
        name=site["name"],
        link=linked(site_name(site["name"]), href),
        graph=html('<div class="graph">{note}</div>', note=note) if note else EMPTY,
        verdict=verdict_note(site),
        heat=heat(site["gpu_ns"] / total if total else 0),
        time=format_duration(site["gpu_ns"]),
        share=percent(site["gpu_ns"], total),
        launches=launches,
        mean=format_duration(site["gpu_ns"] / launches) if launches else "-",
        spread_cells=spread_cells,
        kernels=kernels,
    )


def _unattributed(document: Mapping[str, Any]) -> Html:
    unattributed = document["unattributed"]
    if not unattributed["launches"]:
        return EMPTY
    return html(
        '<p class="warning">{launches} GPU records ({time}) could not be attributed to a '
        "call site.</p>",
        launches=unattributed["launches"],
        time=format_duration(unattributed["gpu_ns"]),
    )


def _chart(sites: list[Mapping[str, Any]]) -> Html:
    longest = max((site["gpu_ns"] for site in sites), default=0)
    height = ROW_HEIGHT * len(sites) + 4
    width = LABEL_WIDTH + BAR_WIDTH + 120
    rows = [
        html(
            '<svg class="chart" width="{width}" height="{height}" '
            'viewBox="0 0 {width} {height}" role="img" aria-label="GPU time by call site">',
            width=width,
            height=height,
        )
    ]
    for index, site in enumerate(sites):
        y = index * ROW_HEIGHT + 2
        bar = round(BAR_WIDTH * site["gpu_ns"] / longest, 1) if longest else 0.0
        label = site["name"] if len(site["name"]) <= 48 else site["name"][:45] + "..."
        rows.append(
            html(
                '<g class="bar" data-site="{name}" data-gpu-ns="{gpu_ns}">'
                "<title>{name}: {time}</title>"
                '<text x="{label_x}" y="{text_y}" text-anchor="end">{label}</text>'
                '<rect x="{bar_x}" y="{bar_y}" width="{bar}" height="{bar_height}"/>'
                '<text class="value" x="{value_x}" y="{text_y}">{time}</text></g>',
                name=site["name"],
                gpu_ns=site["gpu_ns"],
                time=format_duration(site["gpu_ns"]),
                label_x=LABEL_WIDTH - 8,
                text_y=y + 15,
                label=label,
                bar_x=LABEL_WIDTH,
                bar_y=y + 3,
                bar=bar,
                bar_height=ROW_HEIGHT - 6,
                value_x=LABEL_WIDTH + bar + 6,
            )
        )
    rows.append(Html("</svg>"))
    return joined(rows, "\n")


def verdict_note(site: Mapping[str, Any]) -> Html:
    """Beneath a site's name, where its launches were timed: their CPU time per launch call, the
    GPU idle they left, and the verdict with its advice (`data-verdict`: "launch-bound" or "")."""
    calls, cpu_ns, idle_ns = site_times(site)
    if not calls:
        return EMPTY
    verdict, advice = site_verdict(site), site_advice(site)
    return html(
        '<div class="verdict" data-verdict="{verdict}" data-launch-cpu-ns="{cpu_ns}" '
        'data-launch-calls="{calls}" data-idle-ns="{idle_ns}">launch CPU {cpu} a call, GPU idle '
        "{idle}{said}</div>",
        verdict=verdict,
        cpu_ns=cpu_ns,
        calls=calls,
        idle_ns=idle_ns,
        cpu=format_duration(per_launch(cpu_ns, calls)),
        idle=format_duration(idle_ns),
        said=f": {verdict}, {advice}" if verdict else "",
    )


def _table(
    sites: list[Mapping[str, Any]],
    total: int,
    files: SourceFiles,
    spread: list[Spread] | None = None,
) -> Html:
    """The ranking table; with `spread` (each site's, in the same order), its cells across
    ranks."""
    across = ranks.HEADERS if spread else EMPTY
    rows = [
        html(
            '<table class="sites">\n<tr><th>call site</th><th>GPU time</th><th>share</th>'
            "<th>launches</th><th>mean</th>{across}<th>kernels</th></tr>",
            across=across,
        )
    ]
    widest = max((s.high for s in spread), default=0) if spread else 0
    rows += [
        site_row(
            site,
            total,
            files.site_link(site["name"]),
            ranks.spread_cells(spread[index], widest, format_duration) if spread else EMPTY,
        )
        for index, site in enumerate(sites)
    ]
    rows.append(Html("</table>"))
    return joined(rows, "\n")


def _line_rows(
    sites: list[Mapping[str, Any]], total: int, files: SourceFiles
) -> dict[tuple[str, int], list[Html]]:
    """Each launching line's cells: GPU time (coloured by share), launches, kernels."""
    lines: dict[tuple[str, int], dict[str, Any]] = {}
    for site in sites:
        frame = files.chains[site["name"]][0]
        if not frame.path:
            continue
        line = lines.setdefault(
            (frame.path, frame.line), {"gpu_ns": 0, "launches": 0, "kernels": {}}
        )
        line["gpu_ns"] += site["gpu_ns"]
        line["launches"] += site["launches"]
        for name, kernel in site["kernels"].items():
            line["kernels"][name] = line["kernels"].get(name, 0) + kernel["gpu_ns"]
    rows = {}
    for place, line in lines.items():
        ranked = sorted(line["kernels"], key=lambda name: -line["kernels"][name])
        names = ", ".join(display_name(name) for name in ranked[:KERNELS_SHOWN])
        more = f" +{len(ranked) - KERNELS_SHOWN}" if len(ranked) > KERNELS_SHOWN else ""
        share = line["gpu_ns"] / total if total else 0
        rows[place] = [
            html(
                '<td class="number {heat}" title="{share}">{time}</td>',
                heat=heat(share),
                share=percent(line["gpu_ns"], total),
                time=format_duration(line["gpu_ns"]),
            ),
            html('<td class="number">{launches}</td>', launches=line["launches"]),
            html(
                '<td class="kernels" title="{all}">{shown}</td>',
                all=", ".join(ranked),
                shown=names + more,
            ),
        ]
    return rows


def _with_backward_cells(
    rows: dict[tuple[str, int], list[Html]], sites: list[Mapping[str, Any]], files: SourceFiles
) -> dict[tuple[str, int], list[Html]]:
    """Each line's cells with its backward time after its GPU time (backward_lines.py): the
    backward kernels of its ops; `all` on a pass's line, whose GPU time holds them."""
    cells: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for site in sites:
        frame = files.chains[site["name"]][0]
        if frame.path:
            cells.setdefault((frame.path, frame.line), []).append(site)
    with_backward = {}
    for place, row in rows.items():
        here = cells.get(place, [])
        backward = sum(site.get(backward_lines.BACKWARD_NS, 0) for site in here)
        shown = [backward_lines.backward_cell(site, format_duration) for site in here]
        text = format_duration(backward) if backward else next(filter(None, shown), "")
        cell = html('<td class="number backward">{time}</td>', time=text)
        with_backward[place] = [row[0], cell, *row[1:]]
    return with_backward


def _with_memory_cells(
    rows: dict[tuple[str, int], list[Html]], sites: list[Mapping[str, Any]], files: SourceFiles
) -> dict[tuple[str, int], list[Html]]:
    """`rows` with each line's memory cell after its launches (MEMORY_SOURCE_HEADERS)."""
    on_line: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for site in sites:
        frame = files.chains[site["name"]][0]
        if frame.path:
            on_line.setdefault((frame.path, frame.line), []).append(site)
    return {
        place: [*cells[:2], memory_cell(on_line.get(place, ())), *cells[2:]]
        for place, cells in rows.items()
    }


def _file_sums(sites: list[Mapping[str, Any]], total: int, files: SourceFiles) -> dict[str, str]:
    """Each file's line of text: the GPU time launched from its lines."""
    sums: dict[str, list[int]] = {}
    for site in sites:
        frame = files.chains[site["name"]][0]
        if frame.path:
            counted = sums.setdefault(frame.path, [0, 0])
            counted[0] += site["gpu_ns"]
            counted[1] += 1
    return {
        path: f"{format_duration(gpu_ns)} of GPU time ({percent(gpu_ns, total)}) from "
        f"{count_of(count, 'call site')} in this file"
        for path, (gpu_ns, count) in sums.items()
    }
