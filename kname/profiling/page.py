"""One self-contained HTML page: a bar chart of GPU time by call site, and the table.

No script, no style sheet or font from elsewhere, no network: inline SVG and CSS only, so the page
opens from a CI artifact or an e-mail. Each bar carries its data (`data-site`, `data-gpu-ns`) for
tests and for anyone reading the source. A site with CUDA graph work says beneath its name which
lines replayed its graph (`<div class="graph">`, as the table's note says it).

A merged document of several ranks shows each line's spread across them (documents/spread.py):
the least, median and most GPU time of one rank, drawn as a range with the median marked
(`data-min-ns`, `data-median-ns`, `data-max-ns`), and the slowest rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from kname.documents.kernel_names import display_name
from kname.documents.spread import Spread, spreads
from kname.documents.tables import graph_note, ranked_sites
from kname.documents.text import count_of, format_duration

BARS_SHOWN = 40
BAR_WIDTH = 600  # px, the longest bar
ROW_HEIGHT = 22
LABEL_WIDTH = 360
SPREAD_WIDTH = 120  # px, a line's range across ranks, from 0 to the most loaded rank of any line

# The page fits the window: the chart scales down, and a kernel name (up to 80 characters
# without a space) may break anywhere; call sites, times and headings stay on one line.
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
.summary { color: #555; margin-top: 0; }
.warning { color: #a00; font-weight: bold; }
svg.chart { max-width: 100%; height: auto; }
svg text { font: 12px ui-monospace, monospace; fill: #222; }
svg .value { fill: #555; }
svg rect { fill: #4e79a7; }
svg.spread line.range { stroke: #4e79a7; stroke-width: 4; }
svg.spread line.median { stroke: #e15759; stroke-width: 2; }
table { border-collapse: collapse; margin-top: 1.5em; }
th, td { padding: 0.25em 0.8em; border-bottom: 1px solid #ddd; text-align: left;
         vertical-align: top; }
th { white-space: nowrap; }
td.number { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.site { font-family: ui-monospace, monospace; white-space: nowrap; }
td.site .graph { color: #555; font-size: 0.9em; white-space: normal; }
ul.kernels { margin: 0; padding-left: 1.2em; }
ul.kernels .kernel { overflow-wrap: anywhere; }
ul.kernels .time { white-space: nowrap; }
"""


def render_page(document: Mapping[str, Any], title: str = "kname profile") -> str:
    """The page for a schema-2 document."""
    spread = spreads(document)
    order = ranked_sites(document, "gpu_ns")
    sites = [document["sites"][index] for index in order]
    total = document["total_gpu_ns"]
    summary = (
        f"{format_duration(total)} of GPU time in "
        f"{count_of(document['total_launches'], 'launch')} from "
        f"{count_of(len(sites), 'call site')} (kname {document.get('kname', '?')})"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style></head>",
        "<body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="summary">{escape(summary)}</p>',
    ]
    unattributed = document["unattributed"]
    if unattributed["launches"]:
        parts.append(
            f'<p class="warning">{unattributed["launches"]} GPU records '
            f"({escape(format_duration(unattributed['gpu_ns']))}) could not be attributed to a "
            "call site.</p>"
        )
    parts.append(_chart(sites[:BARS_SHOWN]))
    parts.append(_table(sites, total, [spread[index] for index in order] if spread else None))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _chart(sites: list[Mapping[str, Any]]) -> str:
    longest = max((site["gpu_ns"] for site in sites), default=0)
    height = ROW_HEIGHT * len(sites) + 4
    width = LABEL_WIDTH + BAR_WIDTH + 120
    rows = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="GPU time by call site">'
    ]
    for index, site in enumerate(sites):
        y = index * ROW_HEIGHT + 2
        bar = round(BAR_WIDTH * site["gpu_ns"] / longest, 1) if longest else 0.0
        label = site["name"] if len(site["name"]) <= 48 else site["name"][:45] + "..."
        rows.append(
            f'<g class="bar" data-site="{escape(site["name"])}" data-gpu-ns="{site["gpu_ns"]}">'
            f"<title>{escape(site['name'])}: {escape(format_duration(site['gpu_ns']))}</title>"
            f'<text x="{LABEL_WIDTH - 8}" y="{y + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y + 3}" width="{bar}" height="{ROW_HEIGHT - 6}"/>'
            f'<text class="value" x="{LABEL_WIDTH + bar + 6}" y="{y + 15}">'
            f"{escape(format_duration(site['gpu_ns']))}</text></g>"
        )
    rows.append("</svg>")
    return "\n".join(rows)


def _table(sites: list[Mapping[str, Any]], total: int, spread: list[Spread] | None = None) -> str:
    ranks = "<th>across ranks: min / median / max</th><th>slowest</th>" if spread else ""
    rows = [
        '<table class="sites">',
        "<tr><th>call site</th><th>GPU time</th><th>share</th><th>launches</th><th>mean</th>"
        f"{ranks}<th>kernels</th></tr>",
    ]
    widest = max((s.high for s in spread), default=0) if spread else 0
    for index, site in enumerate(sites):
        launches = site["launches"]
        mean = format_duration(site["gpu_ns"] / launches) if launches else "-"
        share = f"{100 * site['gpu_ns'] / total:.1f}%" if total else "-"
        kernels = "".join(
            f'<li title="{escape(name)}"><span class="kernel">{escape(display_name(name))}</span>: '
            f'<span class="time">{escape(format_duration(k["gpu_ns"]))} ({k["launches"]})</span>'
            "</li>"
            for name, k in site["kernels"].items()
        )
        note = graph_note(site, text=str).strip().removeprefix("(").removesuffix(")")
        graph = f'<div class="graph">{escape(note)}</div>' if note else ""
        rows.append(
            f'<tr data-site="{escape(site["name"])}"><td class="site">{escape(site["name"])}'
            f"{graph}</td>"
            f'<td class="number">{escape(format_duration(site["gpu_ns"]))}</td>'
            f'<td class="number">{share}</td><td class="number">{launches}</td>'
            f'<td class="number">{escape(mean)}</td>'
            f"{_spread_cells(spread[index], widest) if spread else ''}"
            f'<td><ul class="kernels">{kernels}</ul></td></tr>'
        )
    rows.append("</table>")
    return "\n".join(rows)


def _spread_cells(spread: Spread, widest: int) -> str:
    """A line's spread across ranks: the numbers, a range drawn to the page's one scale, and
    the slowest rank."""
    values = (spread.low, spread.median, spread.high)
    x = [round(SPREAD_WIDTH * value / widest, 1) if widest else 0.0 for value in values]
    low, median, high = (format_duration(value) for value in values)
    drawing = (
        f'<svg class="spread" width="{SPREAD_WIDTH + 4}" height="12" role="img" '
        f'aria-label="{escape(low)} to {escape(high)}, median {escape(median)}" '
        f'data-min-ns="{spread.low}" data-median-ns="{round(spread.median)}" '
        f'data-max-ns="{spread.high}">'
        f'<line class="range" x1="{x[0] + 2}" y1="6" x2="{x[2] + 2}" y2="6"/>'
        f'<line class="median" x1="{x[1] + 2}" y1="1" x2="{x[1] + 2}" y2="11"/></svg>'
    )
    numbers = f"{escape(low)} / {escape(median)} / {escape(high)}"
    return (
        f'<td class="number">{numbers}<br>{drawing}</td>'
        f'<td class="number">rank {spread.slowest}</td>'
    )
