"""A line's spread across the ranks of a merged document, as two cells of a ranking table.

The least, median and most of one rank (GPU time, or a census's launches) in numbers and drawn
as a range with the median marked (`data-min-ns`, `data-median-ns`, `data-max-ns`: the values,
GPU time's or launches), every line to the page's one scale; then the slowest rank, or "all
equal" where no rank had more than another. The drawing shrinks with a narrow window.
"""

from __future__ import annotations

from collections.abc import Callable

from kname.documents.pages.layout import Html, html, joined
from kname.documents.spread import Spread, slowest_rank

SPREAD_WIDTH = 120  # px, a line's range across ranks, from 0 to the most loaded rank of any line
HEADERS = Html("<th>across ranks:<br>min / median / max</th><th>slowest</th>")
STYLE = """
svg.spread { width: 100%; max-width: 124px; height: auto; }
svg.spread line.range { stroke: #4e79a7; stroke-width: 4; }
svg.spread line.median { stroke: #e15759; stroke-width: 2; }
td.spread { white-space: normal; }
td.spread .value { white-space: nowrap; }
"""


def spread_cells(spread: Spread, widest: int, show: Callable[[float], str]) -> Html:
    """A line's spread across ranks: the numbers (through `show`), a range drawn to the page's
    one scale (`widest`: the most loaded rank of any line), and the slowest rank."""
    values = (spread.low, spread.median, spread.high)
    x = [round(SPREAD_WIDTH * value / widest, 1) + 2 if widest else 2.0 for value in values]
    low, median, high = (show(value) for value in values)
    drawing = html(
        '<svg class="spread" width="{width}" height="12" viewBox="0 0 {width} 12" role="img" '
        'aria-label="{low} to {high}, median {median}" '
        'data-min-ns="{low_ns}" data-median-ns="{median_ns}" data-max-ns="{high_ns}">'
        '<line class="range" x1="{x_low}" y1="6" x2="{x_high}" y2="6"/>'
        '<line class="median" x1="{x_median}" y1="1" x2="{x_median}" y2="11"/></svg>',
        width=SPREAD_WIDTH + 4,
        low=low,
        median=median,
        high=high,
        low_ns=spread.low,
        median_ns=round(spread.median),
        high_ns=spread.high,
        x_low=x[0],
        x_median=x[1],
        x_high=x[2],
    )
    numbers = joined(
        (html('<span class="value">{value}</span>', value=value) for value in (low, median, high)),
        " / ",
    )
    return html(
        '<td class="number spread">{numbers}<br>{drawing}</td><td class="number">{slowest}</td>',
        numbers=numbers,
        drawing=drawing,
        slowest=slowest_rank(spread),
    )
