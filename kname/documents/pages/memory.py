"""A profile page's memory (`kname profile --memory`): each view's live bytes over time, the
peak marked (inline SVG), and each line's cell in the source view.

Each timeline carries its data (`data-view`, `data-peak-bytes`, `data-peak-ns`), for tests and
for anyone reading the page's source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kname.documents.memory import POOL_VIEWS, format_bytes, peak_line, shown_view
from kname.documents.pages.layout import EMPTY, Html, html, joined, site_name
from kname.documents.schema import MEMORY
from kname.documents.text import format_duration

WIDTH = 600  # px, the timeline's plot
HEIGHT = 80
MARGIN = 4

STYLE = """
svg.memory polyline { fill: none; stroke: #4e79a7; stroke-width: 1.5; }
svg.memory circle.peak { fill: #e15759; }
svg.memory line.peak { stroke: #e15759; stroke-dasharray: 3 2; }
"""


def memory_section(document: Mapping[str, Any]) -> Html:
    """Each view's timeline with its peak and the line holding the most there; EMPTY for a
    profile that did not measure memory."""
    views = document.get(MEMORY)
    if not views:
        return EMPTY
    parts = [Html("<h3>GPU memory</h3>")]
    for view, numbers in views.items():
        line = peak_line(document, view)
        parts.append(
            html(
                '<p class="summary">{view}: peak {peak}{held}</p>',
                view=view,
                peak=format_bytes(numbers["peak"]),
                held=html(", most held by {line}", line=site_name(line)) if line else EMPTY,
            )
        )
        parts.append(timeline(view, numbers))
    return joined(parts, "\n")


def timeline(view: str, numbers: Mapping[str, Any]) -> Html:
    """One view's live bytes over time as a line, its peak marked by a dot and a dashed line."""
    points = numbers["timeline"]
    if not points:
        return EMPTY
    start, end = points[0][0], points[-1][0]
    span = max(end - start, 1)
    top = max(numbers["peak"], max(bytes_ for _, bytes_ in points), 1)

    def x(time: int) -> float:
        return round(MARGIN + WIDTH * (min(max(time, start), end) - start) / span, 1)

    def y(bytes_: int) -> float:
        return round(MARGIN + HEIGHT * (1 - bytes_ / top), 1)

    drawn = " ".join(f"{x(t)},{y(b)}" for t, b in points)
    peak_x = x(numbers["peak_ns"])
    return html(
        '<svg class="memory chart" width="{width}" height="{height}" '
        'viewBox="0 0 {width} {height}" role="img" aria-label="{view}: live bytes over time, '
        'peak {peak}" data-view="{view}" data-peak-bytes="{peak_bytes}" data-peak-ns="{peak_ns}">'
        '<polyline points="{drawn}"/>'
        '<line class="peak" x1="{peak_x}" y1="{margin}" x2="{peak_x}" y2="{bottom}"/>'
        '<circle class="peak" cx="{peak_x}" cy="{peak_y}" r="3"><title>peak {peak} at {at}'
        "</title></circle></svg>",
        width=WIDTH + 2 * MARGIN,
        height=HEIGHT + 2 * MARGIN,
        view=view,
        peak=format_bytes(numbers["peak"]),
        peak_bytes=numbers["peak"],
        peak_ns=numbers["peak_ns"],
        drawn=drawn,
        peak_x=peak_x,
        peak_y=y(numbers["peak"]),
        margin=MARGIN,
        bottom=MARGIN + HEIGHT,
        at=format_duration(max(numbers["peak_ns"] - start, 0)) + " in",
    )


def memory_cell(sites: Iterable[Mapping[str, Any]]) -> Html:
    """A source line's memory cell: bytes its sites allocated (the view named when a pool's),
    and what they held at the view's peak in its title."""
    allocated: dict[str, int] = {}
    held: dict[str, int] = {}
    for site in sites:
        view = shown_view(site)
        if view is not None:
            numbers = site[MEMORY][view]
            allocated[view] = allocated.get(view, 0) + numbers["allocated"]
            held[view] = held.get(view, 0) + numbers["at_peak"]
    if not allocated:
        return Html("<td></td>")
    shown = ", ".join(
        format_bytes(count) + (f" ({view})" if view in POOL_VIEWS else "")
        for view, count in allocated.items()
    )
    title = "; ".join(
        f"{view}: {format_bytes(count)} held at its peak" for view, count in held.items()
    )
    return html('<td class="number" title="{title}">{shown}</td>', title=title, shown=shown)
