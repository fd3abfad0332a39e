"""A document as a table: a census by launches, a profile by GPU time (what `kname report` prints).

    kname census (census.json, written by kname 0.1.0): 50 launches from 3 call sites
    call site          kernel  library  launches  share  first seen
    step solver.py:12  axpy    numba          30  60.0%           1

    kname profile: 12.4 ms of GPU time in 345 launches from 7 call sites
    call site        GPU time  share  launches     mean  kernels
    step app.py:12    8.10 ms  65.3%        20   405 us  axpy 8.10 ms (20)
    main app.py:30    2.00 ms  16.1%        40  50.0 us  ampere_sgemm_128x64_nn 1.50 ms (20), ...

A merged document of several ranks gains, per site, the spread across ranks (spread.py): the
least, median and most GPU time of one rank (a census: launches), and the slowest rank with how
far it is over the median (`!` where that makes it a straggler, when asked). `by_rank` tables
show each site's row on each rank instead. A profile's spread is of each rank's own work: at a
line of NCCL kernels, the time a rank waited there for slower ranks (spread.waiting_of) is not
its work; lines under the table say how much of such a line's GPU time is waiting, and
`by_rank` tables show each rank's in a column of their own:

    main train.py:41: 41.2 ms of its 52.0 ms is waiting in NCCL kernels for slower ranks
    (most: rank 0, 40.9 ms); the collective's own cost: 5.40 ms a rank

The GPU work of a CUDA graph replay is on the lines that made the graph's nodes, each with the
line that replayed it beside its name (graph_note):

    forward model.py:21  (graph replayed at step runner.py:26)   183 us  42.5%  50  3.66 us  ...
    step runner.py:40  (graph replayed here, its capture not seen)  ...

Kernels are shown by their readable names (kernel_names.py), at most three per site; where two
would read alike in one table, each gets a digest of its full name (kernel_cells). Names and
file labels are written through text.printable: a name read from a file, or made from a hostile
path, cannot move the terminal's cursor or stop the write with an unencodable character. Every
text table (these, and diff.py's) shows a name in at most NAME_WIDTH characters (`name_cell`):
its start and its end around `...`, since a column is as wide as its longest cell, and one name
of 100,000 characters would pad every row to it. The JSON and the pages keep names whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kname.documents import backward_lines
from kname.documents.collectives import split_waiting
from kname.documents.kernel_names import display_name, distinct_forms
from kname.documents.memory import MEMORY_HEADER, has_memory, memory_cells, memory_peak_lines
from kname.documents.schema import (
    BY_RANK,
    CENSUS_SCHEMA,
    COLLECTIVE_NS,
    RANKS,
    REPLAYED_AT,
    REPLAYED_UNSEEN,
)
from kname.documents.spread import (
    Spread,
    is_straggler,
    metric_of,
    own_work,
    ranks_of,
    slowest_rank,
    spread_of,
    spreads,
    waiting_of,
)
from kname.documents.text import columns, count_of, format_duration, printable
from kname.documents.verdict import (
    LAUNCH_BOUND,
    LAUNCH_TIMES,
    per_launch,
    site_advice,
    site_times,
    site_verdict,
)

KERNELS_SHOWN = 3
ADVICE_SHOWN = 5  # launch-bound lines given advice under a profile's table
WAITING_SHOWN = 5  # lines of NCCL kernels whose waiting is said under a profile's table
# A profile's verdict columns (where its launches were timed), before its kernels.
VERDICT_HEADER = ("launch CPU", "GPU idle", "verdict")
REPLAY_SITES_SHOWN = 2
UNATTRIBUTED_ROW = "<unattributed>"
NAME_WIDTH = 120  # the most characters a name (call site, kernel, library) takes in a table
CUT = "..."


def cut(text: str, width: int = NAME_WIDTH) -> str:
    """`text` if it fits in `width` characters (more than 3); else its start and its end around
    `...`, in `width` characters: the end of a call site's name is its file and line."""
    if len(text) <= width:
        return text
    kept = width - len(CUT)
    end = kept // 3
    return text[: kept - end] + CUT + text[len(text) - end :]


def name_cell(text: object) -> str:
    """A name (or a label read from a file) as a table shows it: printable, and cut to
    NAME_WIDTH characters."""
    return cut(printable(text))


# A straggler rule: (threshold, a fraction of the median; the least excess that counts, in ns).
Straggler = tuple[float, int]


def render_table(
    document: Mapping[str, Any],
    source: str = "",
    top: int | None = None,
    straggler: Straggler | None = None,
) -> str:
    """The table of a document of either schema; `top` limits a profile's rows; `straggler`
    marks the sites whose slowest rank is a straggler by that rule."""
    if document["schema"] == CENSUS_SCHEMA:
        return render_census_table(document, source=source, straggler=straggler)
    return render_profile_table(document, source=source, top=top, straggler=straggler)


def render_census_table(
    document: Mapping[str, Any],
    source: str = "",
    title: str = "kname census",
    first_seen: bool = True,
    straggler: Straggler | None = None,
) -> str:
    """A census as an aligned table, most launches first, under a one-line heading (`title`:
    what it is the census of); `first_seen` shows each site's order; `straggler`: the rule that
    marks a site of several ranks with `!`."""
    text_heading = heading(document, source, title)
    header, *rows = census_rows(document, name_cell, first_seen, straggler)
    if not rows:
        return text_heading + "\n"
    left = ("call site", "kernel", "library", "slowest")
    right = tuple(i for i, name in enumerate(header) if name not in left)
    return text_heading + "\n" + columns([header, *rows], right_aligned=right)


def census_rows(
    document: Mapping[str, Any],
    text: Callable[[str], str],
    first_seen: bool = True,
    straggler: Straggler | None = None,
) -> list[tuple[str, ...]]:
    """The header and a row per site of a census's table, most launches first, names through
    `text`: a GPU time column where sites carry one (a profiler's), and with several ranks
    each site's spread across them (`straggler`: the rule that marks one with `!`)."""
    spread = spreads(document)
    timed = any("gpu_ns" in site for site in document["sites"])
    header = ("call site", "kernel", "library", "launches", "share")
    header += ("GPU time",) * timed + ("first seen",) * first_seen
    rows = [header + (SPREAD_HEADER if spread else ())]
    kernel = _census_kernels(document, text)
    for index in ranked_sites(document, "launches"):
        s = document["sites"][index]
        row = (text(s["name"]), kernel[s["kernel"] or "?"], text(s["lib"] or "?"),
               str(s["launches"]), f"{100 * s['share']:.1f}%")  # fmt: skip
        if timed:
            row += (format_duration(s["gpu_ns"]) if "gpu_ns" in s else "-",)
        row += (str(s["order"]),) * first_seen
        if spread:
            flagged = straggler is not None and is_straggler(spread[index], *straggler)
            row += _spread_cells(spread[index], str, flagged)
        rows.append(row)
    return rows


SPREAD_HEADER = ("rank min", "median", "max", "slowest")


def _census_kernels(document: Mapping[str, Any], text: Callable[[str], str]) -> dict[str, str]:
    """{kernel ("?" for none): its cell through `text`} of a census's table, distinct names
    distinct (a census keeps its kernels' names as they came)."""
    kernels = dict.fromkeys(site["kernel"] or "?" for site in document["sites"])
    return distinct_forms({name: text(name) for name in kernels}, NAME_WIDTH)


def render_profile_table(
    document: Mapping[str, Any],
    source: str = "",
    top: int | None = None,
    straggler: Straggler | None = None,
    title: str = "kname profile",
) -> str:
    """A profile as an aligned table, most GPU time first, under a one-line heading (`title`:
    whose profile it is); with several ranks, each site's spread across them (`straggler`: the
    rule that marks one with `!`)."""
    spread = spreads(document)
    order = ranked_sites(document, "gpu_ns")
    sites = [document["sites"][index] for index in order]
    total = document["total_gpu_ns"]
    lines = [heading(document, source, title)]
    shown = order if top is None else order[: max(top, 0)]
    header = ("call site", "GPU time", "share", "launches", "mean")
    header += (*SPREAD_HEADER, "kernels") if spread else ("kernels",)
    # Optional columns before the kernels: memory (--memory), the verdict (--verdict).
    extras = _extra_columns(document, [document["sites"][index] for index in shown])
    for names, _, _ in extras:
        header = header[:-1] + names + header[-1:]
    unattributed = document["unattributed"]
    listed = [document["sites"][index] for index in shown] + [unattributed]
    cells = kernel_cells(k for site in listed for k in list(site["kernels"])[:KERNELS_SHOWN])
    rows = []
    for index in shown:
        site = document["sites"][index]
        row = _profile_row(name_cell(site["name"]) + graph_note(site), site, total, cells)
        if spread:
            flagged = straggler is not None and is_straggler(spread[index], *straggler)
            row = row[:-1] + _spread_cells(spread[index], format_duration, flagged) + row[-1:]
        rows.append(_with_extra_cells(row, site, extras))
    if unattributed["launches"]:
        row = _profile_row(UNATTRIBUTED_ROW, unattributed, total, cells)
        row = row[:-1] + ("",) * len(SPREAD_HEADER) + row[-1:] if spread else row
        rows.append(_with_extra_cells(row, None, extras))
    right = (1, 2, 3, 4, 5, 6, 7) if spread else (1, 2, 3, 4)
    right += _extra_numbers(len(header), extras)
    if backward_lines.shows_backward(document["sites"]):
        header, rows, right = _with_backward_column(header, rows, listed, right)
    if rows:
        lines.append(columns([header, *rows], right_aligned=right).rstrip("\n"))
    lines += advice_lines(document["sites"][index] for index in shown)
    if spread:
        lines += waiting_lines(document)
    hidden = sites[len(shown) :]
    if hidden:
        hidden_ns = sum(site["gpu_ns"] for site in hidden)
        lines.append(
            f"... and {count_of(len(hidden), 'more call site')}: {format_duration(hidden_ns)}"
            f" ({_percent(hidden_ns, total)})"
        )
    lines += backward_lines.unknown_notes(sites, format_duration, name_cell)
    lines.extend(memory_peak_lines(document))
    if unattributed["launches"]:
        lines.append(
            f"kname profile: {count_of(unattributed['launches'], 'GPU record')} "
            f"({format_duration(unattributed['gpu_ns'])}) could not be attributed to a call site;"
            " please report this"
        )
    return "\n".join(lines) + "\n"


def _with_backward_column(
    header: tuple[str, ...],
    rows: list[tuple[str, ...]],
    sites: list[Mapping[str, Any]],
    right: tuple[int, ...],
) -> tuple[tuple[str, ...], list[tuple[str, ...]], tuple[int, ...]]:
    """The backward column after the GPU time (backward per forward line: backward_lines.py);
    `sites` are the rows' sites, in order."""
    cells = [backward_lines.backward_cell(site, format_duration) for site in sites]
    rows = [(*row[:2], cell, *row[2:]) for row, cell in zip(rows, cells, strict=False)]
    header = (*header[:2], backward_lines.HEADER, *header[2:])
    return header, rows, (*(index + (index >= 2) for index in right), 2)


# An optional column group: its headers, a site's cells, and how many of them (from the left)
# are numbers, aligned right.
Extra = tuple[tuple[str, ...], Callable[[Mapping[str, Any]], tuple[str, ...]], int]


def _extra_columns(document: Mapping[str, Any], shown: list[Mapping[str, Any]]) -> list[Extra]:
    """The optional column groups a profile table has: memory, where the profile measured it;
    the verdict's (launch CPU, GPU idle, verdict), where a shown line's launches were timed."""
    extras: list[Extra] = []
    if has_memory(document):
        extras.append((MEMORY_HEADER, memory_cells, len(MEMORY_HEADER)))
    if any(LAUNCH_TIMES in site for site in shown):
        extras.append((VERDICT_HEADER, verdict_cells, 2))
    return extras


def _with_extra_cells(
    row: tuple[str, ...], site: Mapping[str, Any] | None, extras: list[Extra]
) -> tuple[str, ...]:
    """`row` with each optional group's cells before its kernels (blank where `site` is None)."""
    added = tuple(
        cell
        for names, cells_of, _ in extras
        for cell in (cells_of(site) if site is not None else ("",) * len(names))
    )
    return row[:-1] + added + row[-1:]


def _extra_numbers(width: int, extras: list[Extra]) -> tuple[int, ...]:
    """The indices of the optional groups' number columns in a row of `width` cells."""
    start = width - 1 - sum(len(names) for names, _, _ in extras)
    numbers: list[int] = []
    for names, _, count in extras:
        numbers += range(start, start + count)
        start += len(names)
    return tuple(numbers)


def verdict_cells(site: Mapping[str, Any]) -> tuple[str, str, str]:
    """A profile site's launch CPU time per launch call, the GPU idle its launches left, and its
    verdict (verdict.py); blank where its launches were not timed."""
    calls, cpu_ns, idle_ns = site_times(site)
    if not calls:
        return "", "", ""
    return format_duration(per_launch(cpu_ns, calls)), format_duration(idle_ns), site_verdict(site)


def advice_lines(sites: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line of advice per launch-bound site, at most ADVICE_SHOWN of them."""
    advised = [(name_cell(site["name"]), site_advice(site)) for site in sites]
    lines = [f"{name} is {LAUNCH_BOUND}: {advice}" for name, advice in advised if advice]
    if len(lines) > ADVICE_SHOWN:
        lines[ADVICE_SHOWN:] = [f"... and {count_of(len(lines) - ADVICE_SHOWN, 'more')}"]
    return lines


def waiting_lines(document: Mapping[str, Any]) -> list[str]:
    """A line for each site (the WAITING_SHOWN that waited most) whose NCCL kernels waited for
    slower ranks: how much of its GPU time, the rank that waited most, the collective's cost."""
    ranks, sites = ranks_of(document), document["sites"]
    waited = []  # (waiting on all ranks, index of the site): the lists are made again if shown
    for index, site in enumerate(sites):
        waiting = waiting_of(site)
        if waiting and any(waiting):
            waited.append((-sum(waiting), index))
    waited.sort()
    lines = []
    for total, index in waited[:WAITING_SHOWN]:
        site = sites[index]
        own, waiting = split_waiting(site[BY_RANK][COLLECTIVE_NS])
        most = max(waiting)
        lines.append(
            f"{name_cell(site['name'])}: {format_duration(-total)} of its "
            f"{format_duration(site['gpu_ns'])} is waiting in NCCL kernels for slower ranks "
            f"(most: rank {ranks[waiting.index(most)]}, {format_duration(most)}); "
            f"the collective's own cost: {format_duration(own)} a rank"
        )
    if len(waited) > WAITING_SHOWN:
        lines.append(f"... and {count_of(len(waited) - WAITING_SHOWN, 'more line')} waiting")
    return lines


def ranked_sites(document: Mapping[str, Any], metric: str) -> list[int]:
    """The indices of a document's sites, most of `metric` (gpu_ns, launches) first, then in
    first-seen order: the rows of a table."""
    sites = document["sites"]
    return sorted(range(len(sites)), key=lambda i: (-sites[i][metric], sites[i]["order"]))


def kernel_cells(names: Iterable[str]) -> dict[str, str]:
    """{kernel name: its cell} for the kernels of one table: readable (display_name), cut like
    any name, and distinct for distinct names (two cut alike get a digest of the name)."""
    shown = {name: name_cell(display_name(name)) for name in names}
    return distinct_forms(shown, NAME_WIDTH)


def kernels_cell(
    kernels: Mapping[str, Mapping[str, int]],
    shown: int = KERNELS_SHOWN,
    cells: Mapping[str, str] | None = None,
) -> str:
    """The first `shown` kernels with their GPU time and launches, then how many more; `cells`:
    the table's kernel_cells (those of `kernels` alone by default)."""
    items = list(kernels.items())
    named = kernel_cells(list(kernels)[:shown]) if cells is None else cells
    parts = [
        f"{named[name]} {format_duration(k['gpu_ns'])} ({k['launches']})"
        for name, k in items[:shown]
    ]
    if len(items) > shown:
        parts.append(f"+{len(items) - shown} more")
    return ", ".join(parts)


def render_by_rank(document: Mapping[str, Any], source: str = "", top: int | None = None) -> str:
    """Each site's row on each rank (a document of several ranks): its GPU time (a census:
    launches), and how far that is from the site's median rank."""
    ranks = ranks_of(document)
    profile = document["schema"] != CENSUS_SCHEMA
    text_heading = heading(document, source)
    if len(ranks) < 2:
        return text_heading + "\nkname report: --by-rank needs files of several ranks\n"
    metric = metric_of(document)
    order = ranked_sites(document, metric)
    shown = order if top is None else order[: max(top, 0)]
    # Each rank's waiting in NCCL kernels, where a shown site has any (its own work is compared).
    waits = profile and any(COLLECTIVE_NS in document["sites"][i][BY_RANK] for i in shown)
    if profile:
        header = ("call site", "rank", "GPU time", "launches", "mean", "vs median")
        header += ("waiting",) * waits
    else:
        header = ("call site", "kernel", "rank", "launches", "vs median")
    rows: list[tuple[str, ...]] = []
    kernel = {} if profile else _census_kernels(document, name_cell)
    for index in shown:
        site = document["sites"][index]
        per_rank = site[BY_RANK]
        own = own_work(site, metric)
        median = spread_of(own, ranks).median
        waiting = (waiting_of(site) or [None] * len(ranks)) if waits else []
        label = [name_cell(site["name"])] + ([] if profile else [kernel[site["kernel"] or "?"]])
        for position, (rank, value, launches) in enumerate(
            zip(ranks, per_rank[metric], per_rank["launches"], strict=True)
        ):
            if profile:
                mean = format_duration(value / launches) if launches else "-"
                cells = (str(rank), format_duration(value), str(launches), mean)
            else:
                cells = (str(rank), str(launches))
            row = (*label, *cells, _versus(own[position], median))
            if waits:
                waited = waiting[position]
                row += ("" if waited is None else format_duration(waited),)
            rows.append(row)
            label = [""] * len(label)
    right = ((1, 2, 3, 4, 5) + (6,) * waits) if profile else (2, 3, 4)
    return text_heading + "\n" + columns([header, *rows], right_aligned=right)


def heading(document: Mapping[str, Any], source: str = "", title: str | None = None) -> str:
    """`kname profile (FILE, ...): 12.4 ms of GPU time in 345 launches from 7 call sites`, or a
    census's `kname census (FILE, ...): 50 launches from 3 call sites`; `title` in place of
    `kname census` or `kname profile` (`kname profile of process 4242` at exit)."""
    launches = count_of(document["total_launches"], "launch")
    sites = count_of(len(document["sites"]), "call site")
    if document["schema"] == CENSUS_SCHEMA:
        return f"{title or 'kname census'}{_origin(document, source)}: {launches} from {sites}"
    time = format_duration(document["total_gpu_ns"])
    origin = _origin(document, source)
    return f"{title or 'kname profile'}{origin}: {time} of GPU time in {launches} from {sites}"


def _spread_cells(spread: Spread, show: Any, flagged: bool = False) -> tuple[str, ...]:
    """min, median, max and the slowest rank (with how far over the median it is)."""
    if spread.excess == float("inf"):
        over = " (median 0)"
    else:
        over = f" (+{100 * spread.excess:.0f}%)" if round(100 * spread.excess) else ""
    slowest = f"{'! ' if flagged else ''}{slowest_rank(spread)}{over}"
    return (show(spread.low), show(spread.median), show(spread.high), slowest)


def _versus(value: int, median: float) -> str:
    """`+12.5%`: how far `value` is from the median; `0.0%` within a twentieth of a percent."""
    if not median:
        return "-" if value else "0"
    percent = 100 * (value - median) / median
    return f"{percent:+.1f}%" if abs(percent) >= 0.05 else "0.0%"


def graph_note(site: Mapping[str, Any], text: Callable[[str], str] = name_cell) -> str:
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
    """` (FILE, written by kname X, N processes, M ranks)` for a saved document; for a live one,
    only ` (rank R of W)` in a job of several ranks."""
    records = document.get(RANKS, ())
    if len(records) > 1:
        who = [count_of(len(records), "rank")]
    elif records and records[0]["world_size"] > 1:
        who = [f"rank {records[0]['rank']} of {records[0]['world_size']}"]
    else:
        who = []
    if not source:
        return f" ({who[0]})" if who else ""
    processes = document.get("processes", 1)
    # As many processes as ranks: the ranks say it.
    merged = [count_of(processes, "process")] if processes not in (1, len(records)) else []
    written_by = name_cell(document.get("kname", "?"))
    details = "".join(f", {part}" for part in [*merged, *who])
    return f" ({printable(source)}, written by kname {written_by}{details})"


def _profile_row(
    name: str, site: Mapping[str, Any], total: int, cells: Mapping[str, str]
) -> tuple[str, ...]:
    launches = site["launches"]
    mean = format_duration(site["gpu_ns"] / launches) if launches else "-"
    return (
        name,
        format_duration(site["gpu_ns"]),
        _percent(site["gpu_ns"], total),
        str(launches),
        mean,
        kernels_cell(site["kernels"], cells=cells),
    )


def _percent(part: int, total: int) -> str:
    return f"{100 * part / total:.1f}%" if total else "-"
