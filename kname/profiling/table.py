"""The profile as a table ranked by GPU time: call site, GPU time, share, launches, mean, kernels.

    kname profile: 12.4 ms of GPU time in 345 launches from 7 call sites
    call site        GPU time  share  launches     mean  kernels
    step app.py:12    8.10 ms  65.3%        20   405 us  axpy 8.10 ms (20)
    main app.py:30    2.00 ms  16.1%        40  50.0 us  ampere_sgemm_128x64_nn 1.50 ms (20), ...

Kernels are shown by their readable names (kernel_names.py), at most three per site. Names and
file labels are written through census_file.printable: a name read from a file, or made from a
hostile path, cannot move the terminal's cursor or stop the write with an unencodable character.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kname.census_file import columns, count_of, printable
from kname.profiling.kernel_names import display_name

KERNELS_SHOWN = 3
UNATTRIBUTED_ROW = "<unattributed>"
_UNITS = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us"))


def format_duration(ns: float) -> str:
    """`812 ns`, `12.3 us`, `4.56 ms`, `1.23 s`: three significant digits, ASCII units."""
    for scale, unit in _UNITS:
        if ns >= scale * 0.9995:  # what rounds to 1000 of the unit below is 1.00 of this one
            value = ns / scale
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f} {unit}"
    return f"{ns:.0f} ns"


def kernels_cell(kernels: Mapping[str, Mapping[str, int]], shown: int = KERNELS_SHOWN) -> str:
    """The first `shown` kernels with their GPU time and launches, then how many more."""
    items = list(kernels.items())
    cells = [
        f"{printable(display_name(name))} {format_duration(k['gpu_ns'])} ({k['launches']})"
        for name, k in items[:shown]
    ]
    if len(items) > shown:
        cells.append(f"+{len(items) - shown} more")
    return ", ".join(cells)


def render_profile_table(
    document: Mapping[str, Any], source: str = "", top: int | None = None
) -> str:
    """A schema-2 document as an aligned table, most GPU time first, with a heading line."""
    sites = sorted(document["sites"], key=lambda s: (-s["gpu_ns"], s["order"]))
    total = document["total_gpu_ns"]
    lines = [_heading(document, source, len(sites))]
    shown = sites if top is None else sites[: max(top, 0)]
    header = ("call site", "GPU time", "share", "launches", "mean", "kernels")
    rows = [_row(printable(site["name"]), site, total) for site in shown]
    unattributed = document["unattributed"]
    if unattributed["launches"]:
        rows.append(_row(UNATTRIBUTED_ROW, unattributed, total))
    if rows:
        lines.append(columns([header, *rows], right_aligned=(1, 2, 3, 4)).rstrip("\n"))
    hidden = sites[len(shown) :]
    if hidden:
        hidden_ns = sum(site["gpu_ns"] for site in hidden)
        lines.append(
            f"... and {count_of(len(hidden), 'more call site')}: {format_duration(hidden_ns)}"
            f" ({_percent(hidden_ns, total)})"
        )
    if unattributed["launches"]:
        lines.append(
            f"kname profile: {count_of(unattributed['launches'], 'GPU record')} "
            f"({format_duration(unattributed['gpu_ns'])}) could not be attributed to a call site;"
            " please report this"
        )
    return "\n".join(lines) + "\n"


def render_document(document: Mapping[str, Any], source: str = "", top: int | None = None) -> str:
    """The table of a document of either schema (what `kname report FILE` prints)."""
    if document["schema"] == 1:
        from kname.census_file import render_table

        return render_table(document, source=source)
    return render_profile_table(document, source=source, top=top)


def _heading(document: Mapping[str, Any], source: str, site_count: int) -> str:
    origin = ""
    if source:
        processes = document.get("processes", 1)
        merged = f", {count_of(processes, 'process')}" if processes != 1 else ""
        written_by = printable(document.get("kname", "?"))
        origin = f" ({printable(source)}, written by kname {written_by}{merged})"
    return (
        f"kname profile{origin}: {format_duration(document['total_gpu_ns'])} of GPU time in "
        f"{count_of(document['total_launches'], 'launch')} from "
        f"{count_of(site_count, 'call site')}"
    )


def _row(name: str, site: Mapping[str, Any], total: int) -> tuple[str, ...]:
    launches = site["launches"]
    mean = format_duration(site["gpu_ns"] / launches) if launches else "-"
    return (
        name,
        format_duration(site["gpu_ns"]),
        _percent(site["gpu_ns"], total),
        str(launches),
        mean,
        kernels_cell(site["kernels"]),
    )


def _percent(part: int, total: int) -> str:
    return f"{100 * part / total:.1f}%" if total else "-"
