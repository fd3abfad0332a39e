"""Backward per forward line, in documents: the sites' fields, and the names that carry them.

A backward launch is recorded under a name of its own (kname.profiling.backward): the line that
started the pass, then BACKWARD_OF and the forward line whose op its autograd node
differentiates, then "]" (or UNKNOWN for that line: no forward call took the node's number). So
the join adds them up with no key of its own, and a trace shows both lines. A profile's document
folds them back (`fold_backward_sites`): the pass's row keeps every launch and all its time, as
before, with BACKWARD_LINES_NS of it charged to forward lines and BACKWARD_UNKNOWN_NS to none
known; each forward line's row gains BACKWARD_NS and BACKWARD_LAUNCHES (a row of its own made,
with no forward time, for a line whose forward launched nothing: a split, a view). Every field is
optional: absent in files written before, and where it would be 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

BACKWARD_OF = " [backward of "
UNKNOWN = "(forward line unknown)"

BACKWARD_NS = "backward_ns"  # forward line: GPU time of the backward kernels of its ops
BACKWARD_LAUNCHES = "backward_launches"  # and their launches
BACKWARD_LINES_NS = "backward_lines_ns"  # a pass's line: its time charged to forward lines
BACKWARD_UNKNOWN_NS = "backward_unknown_ns"  # a pass's line: its nodes with no known line
FIELDS = (BACKWARD_NS, BACKWARD_LAUNCHES, BACKWARD_LINES_NS, BACKWARD_UNKNOWN_NS)

_names: dict[tuple[str, str], str] = {}  # made once per pair: launches share the str


def backward_site(pass_name: str, forward: str) -> str:
    """The name a backward launch is recorded under: its pass's line, and its forward line."""
    key = (pass_name, forward)
    name = _names.get(key)
    if name is None:
        name = _names.setdefault(key, f"{pass_name}{BACKWARD_OF}{forward}]")
    return name


def pass_unless_forward_known(name: str) -> str:
    """`name`, but its pass's line where it is a backward site whose forward line is UNKNOWN:
    the name memory charges a block to. Memory's rows are not folded as launches' are, so a
    backward block gets a row of its own only where its forward line is known (with backward
    per forward line off, none is)."""
    parts = split_backward_site(name)
    return parts[0] if parts is not None and parts[1] == UNKNOWN else name


def split_backward_site(name: str) -> tuple[str, str] | None:
    """(pass's line, forward line) of a name backward_site made; None for any other name."""
    if not name.endswith("]"):
        return None
    pass_name, marker, forward = name.partition(BACKWARD_OF)
    if not marker or not pass_name or len(forward) < 2:
        return None
    return pass_name, forward[:-1]


def fold_backward_sites(
    sites: list[dict[str, Any]],
    new_row: Callable[[str, int], dict[str, Any]],
    graph_keys: tuple[str, str],
) -> list[dict[str, Any]]:
    """`sites` with every backward launch's row folded into its pass's row, and its time added to
    its forward line's (see the module); `new_row(name, order)` makes a row with no launch;
    `graph_keys`: schema.py's REPLAYED_AT and REPLAYED_UNSEEN (schema.py imports this module)."""
    rows: dict[str, dict[str, Any]] = {}
    folded: list[tuple[str, str, dict[str, Any]]] = []
    for site in sites:
        parts = split_backward_site(site["name"])
        if parts is None:
            rows[site["name"]] = site
        else:
            folded.append((*parts, site))
    for pass_name, forward, site in folded:
        row = _row(rows, pass_name, site["order"], new_row)
        _add_launches(row, site)
        _add_graph_work(row, site, *graph_keys)
        if forward == UNKNOWN:
            _add(row, BACKWARD_UNKNOWN_NS, site["gpu_ns"])
            continue
        _add(row, BACKWARD_LINES_NS, site["gpu_ns"])
        line = _row(rows, forward, site["order"], new_row)
        _add(line, BACKWARD_NS, site["gpu_ns"])
        _add(line, BACKWARD_LAUNCHES, site["launches"])
    return list(rows.values())


def _row(
    rows: dict[str, dict[str, Any]], name: str, order: int, new_row: Callable
) -> dict[str, Any]:
    row = rows.get(name)
    if row is None:
        row = rows[name] = new_row(name, order)
    row["order"] = min(row["order"], order)
    return row


def _add_launches(row: dict[str, Any], site: Mapping[str, Any]) -> None:
    """A backward launch's row's launches, time and kernels, into its pass's row."""
    row["launches"] += site["launches"]
    row["gpu_ns"] += site["gpu_ns"]
    kernels = row["kernels"]
    for kernel, counts in site["kernels"].items():
        _add_counts(kernels, kernel, counts)
    ranked = sorted(kernels.items(), key=lambda kv: (-kv[1]["gpu_ns"], -kv[1]["launches"], kv[0]))
    row["kernels"] = dict(ranked)
    row["kernel"] = next(iter(row["kernels"]), "")


def _add_graph_work(
    row: dict[str, Any], site: Mapping[str, Any], replayed_at: str, replayed_unseen: str
) -> None:
    """A backward launch's graph work (a compiled backward replaying a CUDA graph), kept."""
    for replay, counts in site.get(replayed_at, {}).items():
        _add_counts(row.setdefault(replayed_at, {}), replay, counts)
    if replayed_unseen in site:
        _add_counts(row, replayed_unseen, site[replayed_unseen])


def _add_counts(into: dict[str, Any], key: str, counts: Mapping[str, int]) -> None:
    mine = into.setdefault(key, {"launches": 0, "gpu_ns": 0})
    mine["launches"] += counts["launches"]
    mine["gpu_ns"] += counts["gpu_ns"]


def _add(row: dict[str, Any], field: str, value: int) -> None:
    if value:
        row[field] = row.get(field, 0) + value


def backward_fields(site: Mapping[str, Any]) -> dict[str, int]:
    """The backward fields a site has (absent ones left out)."""
    return {field: site[field] for field in FIELDS if field in site}


def summed_backward_fields(sites: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The sum of each backward field over `sites` (a merge's), the absent left out."""
    sums: dict[str, int] = {}
    for site in sites:
        for field, value in backward_fields(site).items():
            sums[field] = sums.get(field, 0) + value
    return {field: value for field, value in sums.items() if value}


# --- in the table and on the page -------------------------------------------------------------

HEADER = "backward"
PASS_CELL = "all"  # a pass's row: its GPU time is every backward launch of the pass


def shows_backward(sites: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a table of `sites` has the backward column (a profile with backward lines)."""
    return any(field in site for site in sites for field in FIELDS)


def backward_cell(site: Mapping[str, Any], duration: Callable[[float], str]) -> str:
    """The backward column's cell: a forward line's backward time, PASS_CELL on a pass's row."""
    if BACKWARD_NS in site:
        return duration(site[BACKWARD_NS])
    if BACKWARD_LINES_NS in site or BACKWARD_UNKNOWN_NS in site:
        return PASS_CELL
    return ""


def unknown_notes(
    sites: Iterable[Mapping[str, Any]], duration: Callable[[float], str], text: Callable
) -> list[str]:
    """One line per pass with backward time whose forward line is not known."""
    return [
        f"kname profile: {duration(site[BACKWARD_UNKNOWN_NS])} of the backward pass at "
        f"{text(site['name'])} ran nodes with no known forward line (made in C++ with no torch "
        "call above, or by a forward recomputed in backward: docs/backward_lines.md)"
        for site in sites
        if site.get(BACKWARD_UNKNOWN_NS)
    ]


# --- read back: the bounds a file's fields must keep --------------------------------------------


def field_fault(site: Mapping[str, Any], is_count: Callable[[Any], bool]) -> str | None:
    """What is wrong with a site's backward fields (None: nothing): each a count, and a pass's
    parts within its GPU time."""
    for field in FIELDS:
        if field in site and not is_count(site[field]):
            return f"{field} must be a count"
    parts = site.get(BACKWARD_LINES_NS, 0) + site.get(BACKWARD_UNKNOWN_NS, 0)
    if parts > site["gpu_ns"]:
        return f"{BACKWARD_LINES_NS} and {BACKWARD_UNKNOWN_NS} add up to more than its gpu_ns"
    return None


def totals_fault(sites: Iterable[Mapping[str, Any]]) -> str | None:
    """What is wrong between sites (None: nothing): the forward lines' backward time is what
    the passes charged to forward lines."""
    charged = given = 0
    for site in sites:
        charged += site.get(BACKWARD_LINES_NS, 0)
        given += site.get(BACKWARD_NS, 0)
    if charged != given:
        return (
            f"the forward lines' {BACKWARD_NS} add up to {given}, not the "
            f"{BACKWARD_LINES_NS} of the passes ({charged})"
        )
    return None


def diff_note(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    duration: Callable[[float], str],
) -> str:
    """`  (backward 310 us -> 450 us)` for a forward line with backward time in either profile
    of a diff, else "" (the passes' rows carry the total, judged as any line)."""
    was = (before or {}).get(BACKWARD_NS)
    now = (after or {}).get(BACKWARD_NS)
    if was is None and now is None:
        return ""
    return f"  (backward {duration(was or 0)} -> {duration(now or 0)})"
