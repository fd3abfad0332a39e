"""A document as a table: a census by launches, a profile by GPU time (what `kname report` prints).

    kname census (census.json, written by kname 0.1.0): 50 launches from 3 call sites
    call site          kernel  library  launches  share  first seen
    step solver.py:12  axpy    numba          30  60.0%           1

    kname profile: 12.4 ms of GPU time in 345 launches from 7 call sites
    call site        GPU time  share  launches     mean  kernels
    step app.py:12    8.10 ms  65.3%        20   405 us  axpy 8.10 ms (20)
    main app.py:30    2.00 ms  16.1%        40  50.0 us  ampere_sgemm_128x64_nn 1.50 ms (20), ...

The GPU work of a CUDA graph replay is on the lines that made the graph's nodes, each with the
line that replayed it beside its name (graph_note):

    forward model.py:21  (graph replayed at step runner.py:26)   183 us  42.5%  50  3.66 us  ...
    step runner.py:40  (graph replayed here, its capture not seen)  ...

Kernels are shown by their readable names (kernel_names.py), at most three per site. Names and
file labels are written through text.printable: a name read from a file, or made from a hostile
path, cannot move the terminal's cursor or stop the write with an unencodable character.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kname.documents.kernel_names import display_name
from kname.documents.schema import CENSUS_SCHEMA, REPLAYED_AT, REPLAYED_UNSEEN
from kname.documents.text import columns, count_of, format_duration, printable

KERNELS_SHOWN = 3
REPLAY_SITES_SHOWN = 2
UNATTRIBUTED_ROW = "<unattributed>"


def render_table(document: Mapping[str, Any], source: str = "", top: int | None = None) -> str:
    """The table of a document of either schema; `top` limits a profile's rows."""
    if document["schema"] == CENSUS_SCHEMA:
        return render_census_table(document, source=source)
    return render_profile_table(document, source=source, top=top)


def render_census_table(document: Mapping[str, Any], source: str = "") -> str:
    """A census as an aligned table, most launches first, with a one-line heading."""
    sites = sorted(document["sites"], key=lambda s: (-s["launches"], s["order"]))
    launches = count_of(document["total_launches"], "launch")
    heading = f"kname census{_origin(document, source)}: {launches} from "
    heading += count_of(len(sites), "call site")
    if not sites:
        return heading + "\n"
    header = ("call site", "kernel", "library", "launches", "share", "first seen")
    rows = [
        (printable(s["name"]), printable(s["kernel"] or "?"), printable(s["lib"] or "?"),
         str(s["launches"]), f"{100 * s['share']:.1f}%", str(s["order"]))
        for s in sites
    ]  # fmt: skip
    return heading + "\n" + columns([header, *rows], right_aligned=(3, 4, 5))


def render_profile_table(
    document: Mapping[str, Any], source: str = "", top: int | None = None
) -> str:
    """A profile as an aligned table, most GPU time first, with a heading line."""
    sites = sorted(document["sites"], key=lambda s: (-s["gpu_ns"], s["order"]))
    total = document["total_gpu_ns"]
    lines = [
        f"kname profile{_origin(document, source)}: {format_duration(total)} of GPU time in "
        f"{count_of(document['total_launches'], 'launch')} from "
        f"{count_of(len(sites), 'call site')}"
    ]
    shown = sites if top is None else sites[: max(top, 0)]
    header = ("call site", "GPU time", "share", "launches", "mean", "kernels")
    rows = [_profile_row(printable(site["name"]) + graph_note(site), site, total) for site in shown]
    unattributed = document["unattributed"]
    if unattributed["launches"]:
        rows.append(_profile_row(UNATTRIBUTED_ROW, unattributed, total))
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


def graph_note(site: Mapping[str, Any], text: Callable[[str], str] = printable) -> str:
    """`  (graph replayed at step runner.py:26)` for a site with graph work, else "": the lines
    that replayed it (most GPU time first, each through `text`), and how many of its launches,
    when not all."""
    notes = []
    replays = site.get(REPLAYED_AT)
    if replays:
        names = [text(name) for name in replays]
        shown = names[:REPLAY_SITES_SHOWN]
        if len(names) > len(shown):
            shown.append(f"+{len(names) - len(shown)} more")
        notes.append(f"graph replayed at {', '.join(shown)}{_part_of(site, replays.values())}")
    unseen = site.get(REPLAYED_UNSEEN)
    if unseen:
        notes.append(f"graph replayed here, its capture not seen{_part_of(site, [unseen])}")
    return f"  ({'; '.join(notes)})" if notes else ""


def _part_of(site: Mapping[str, Any], counts: Iterable[Mapping[str, int]]) -> str:
    launches = sum(count["launches"] for count in counts)
    return "" if launches == site["launches"] else f": {launches} of {site['launches']} launches"


def _origin(document: Mapping[str, Any], source: str) -> str:
    """` (FILE, written by kname X, N processes)` for a saved document, "" for a live one."""
    if not source:
        return ""
    processes = document.get("processes", 1)
    merged = f", {count_of(processes, 'process')}" if processes != 1 else ""
    written_by = printable(document.get("kname", "?"))
    return f" ({printable(source)}, written by kname {written_by}{merged})"


def _profile_row(name: str, site: Mapping[str, Any], total: int) -> tuple[str, ...]:
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
