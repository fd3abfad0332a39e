"""Two documents compared: launches per call site and kernel (censuses, and `--fail-on-change`),
and GPU time per call site (profiles, `--fail-on-slower 10%`).

A site counts as slower when its GPU time grew by more than the threshold (a fraction of its old
time) AND by at least `min_time_ns` (default 50 us). The second condition keeps run-to-run noise
on tiny kernels (a few us each, jittering by a us) from failing a CI job. Faster is the mirror
image: slower with before and after swapped. The total GPU time is judged by the same rule, so a
regression still shows when lines moved and every site was renamed (added and removed sites are
listed, never counted as slower themselves). Names and labels are printed through
text.printable, as in the tables, and names cut to tables.NAME_WIDTH (tables.name_cell);
kernels as tables.kernel_cells shows them, distinct names distinct. A site whose launch-bound
verdict (verdict.py) changed, its launches timed in both, says so beside its name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from kname.documents.backward_lines import diff_note
from kname.documents.memory import memory_diff_lines
from kname.documents.schema import PROFILE_SCHEMA
from kname.documents.tables import graph_note, kernel_cells, name_cell
from kname.documents.text import columns, count_of, format_duration, printable
from kname.documents.verdict import verdict_change

DEFAULT_MIN_TIME_NS = 50_000
DEFAULT_THRESHOLD = 0.10  # what a diff calls slower or faster when --fail-on-slower is not given
TOTAL = "<total GPU time>"
# A line number: digits after a colon, ending the name or followed by a non-word character.
_LINE = re.compile(r"(?<=:)[0-9]+\b")
# The words a diff uses for its changes, text and page alike, in the order summaries count them.
CENSUS_KINDS = ("added", "removed", "changed")
PROFILE_KINDS = ("slower", "faster", "added", "removed")
NO_CENSUS_CHANGE = "no change in launches per call site"
NO_PROFILE_CHANGE = "no site slower or faster"


class Change(NamedTuple):
    """How one call site's launch count differs between two documents."""

    kind: str  # "added", "removed" or "changed"
    name: str
    kernel: str
    before: int
    after: int


def launch_counts(
    document: Mapping[str, Any], ignore_lines: bool = False
) -> dict[tuple[str, str], int]:
    """{(call site, kernel): launches} of a document of either schema.

    With `ignore_lines`, the number after each `:` in a name (the line of `{path}:{line}`) is
    `*`, so the launches of one function, file and kernel add up whatever their lines.
    """
    counts: dict[tuple[str, str], int] = {}
    for site in document["sites"]:
        if document.get("schema") == PROFILE_SCHEMA:
            pairs = [(k, v["launches"]) for k, v in site["kernels"].items()]
        else:
            pairs = [(site["kernel"], site["launches"])]
        name = _LINE.sub("*", site["name"]) if ignore_lines else site["name"]
        for kernel, launches in pairs:
            counts[name, kernel] = counts.get((name, kernel), 0) + launches
    return counts


def compare(
    before: Mapping[str, Any], after: Mapping[str, Any], ignore_lines: bool = False
) -> list[Change]:
    """Launch counts per call site (name and kernel) that differ: added, removed, changed.

    With `ignore_lines`, launches are compared per function, file and kernel (launch_counts),
    so a moved line is no change.
    """
    old, new = launch_counts(before, ignore_lines), launch_counts(after, ignore_lines)
    changes = [Change("added", *key, 0, new[key]) for key in new if key not in old]
    changes += [Change("removed", *key, old[key], 0) for key in old if key not in new]
    changes += [
        Change("changed", *key, old[key], new[key])
        for key in new
        if key in old and old[key] != new[key]
    ]
    return changes


def render_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str],
    ignore_lines: bool = False,
) -> str:
    """`compare` as text: a summary line, then one aligned line per changed call site."""
    changes = compare(before, after, ignore_lines)
    totals = " -> ".join(
        f"{printable(label)} ({count_of(document['total_launches'], 'launch')})"
        for label, document in zip(labels, (before, after), strict=True)
    )
    if not changes:
        ignored = " (lines ignored)" if ignore_lines else ""
        return f"kname census diff: {totals}: {NO_CENSUS_CHANGE}{ignored}\n"
    kinds = kinds_of(changes, CENSUS_KINDS)
    kernels = kernel_cells(c.kernel or "?" for c in changes)
    rows = [
        (c.kind, f"{name_cell(c.name)} [{kernels[c.kernel or '?']}]", str(c.before), "->",
         str(c.after), f"({c.after - c.before:+d})")
        for c in changes
    ]  # fmt: skip
    return f"kname census diff: {totals}: {kinds}\n" + columns(rows, right_aligned=(2, 4, 5))


def kinds_of(changes: Sequence[Change | GpuChange], kinds: tuple[str, ...]) -> str:
    """`2 added, 1 changed`: how many changes of each of `kinds` there are, those with none
    left out."""
    counted = [sum(c.kind == kind for c in changes) for kind in kinds]
    return ", ".join(f"{n} {kind}" for n, kind in zip(counted, kinds, strict=True) if n)


@dataclass(frozen=True)
class GpuChange:
    """How one call site's GPU time compares between two profiles."""

    kind: str  # "slower", "faster", "same", "added" or "removed"
    name: str
    before_ns: int
    after_ns: int
    before_launches: int
    after_launches: int
    note: str = ""  # graph_note of the site (where a graph replay ran its work); verdict change


def is_slower(before_ns: int, after_ns: int, threshold: float, min_time_ns: int) -> bool:
    """Grew by more than `threshold` of the old time and by at least `min_time_ns`."""
    grown = after_ns - before_ns
    return grown > 0 and grown >= min_time_ns and grown > threshold * before_ns


def compare_gpu(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    threshold: float,
    min_time_ns: int = DEFAULT_MIN_TIME_NS,
) -> list[GpuChange]:
    """Every call site of either profile (schema 2), in `after`'s ranking, removed ones last."""
    old = {site["name"]: site for site in before["sites"]}
    new = {site["name"]: site for site in after["sites"]}
    changes = []
    for name in [*new, *(name for name in old if name not in new)]:
        was, now = old.get(name), new.get(name)
        kind = "added" if was is None else "removed" if now is None else None
        change = GpuChange(
            kind or "",
            name,
            was["gpu_ns"] if was else 0,
            now["gpu_ns"] if now else 0,
            was["launches"] if was else 0,
            now["launches"] if now else 0,
            graph_note(now or was) + diff_note(was, now, format_duration) + _verdict_note(was, now),
        )
        if kind is None:
            change = _judged(change, threshold, min_time_ns)
        changes.append(change)
    return changes


def compare_total(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    threshold: float,
    min_time_ns: int = DEFAULT_MIN_TIME_NS,
) -> GpuChange:
    """The whole program's GPU time, judged like one site."""
    change = GpuChange(
        "",
        TOTAL,
        before["total_gpu_ns"],
        after["total_gpu_ns"],
        before["total_launches"],
        after["total_launches"],
    )
    return _judged(change, threshold, min_time_ns)


def render_gpu_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str],
    threshold: float,
    min_time_ns: int = DEFAULT_MIN_TIME_NS,
) -> str:
    """A summary line, the total, then one aligned line per site that did not stay the same."""
    changes = compare_gpu(before, after, threshold, min_time_ns)
    total = compare_total(before, after, threshold, min_time_ns)
    shown = [c for c in changes if c.kind != "same"]
    kinds = kinds_of(shown, PROFILE_KINDS)
    rule = f"threshold {100 * threshold:g}% and {format_duration(min_time_ns)}"
    heading = (
        f"kname profile diff: {printable(labels[0])} ({format_duration(total.before_ns)}) -> "
        f"{printable(labels[1])} "
        f"({format_duration(total.after_ns)}), {rule}: {kinds or NO_PROFILE_CHANGE}"
    )
    rows = [_row(c) for c in [total, *shown]]
    return heading + "\n" + columns(rows, right_aligned=(2, 4, 5)) if rows else heading + "\n"


def render_count_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], labels: tuple[str, str]
) -> str:
    """Launches per call site and kernel that differ, one line each ("" when none differ)."""
    old, new = launch_counts(before), launch_counts(after)
    keys = [*new, *(key for key in old if key not in new)]
    kernels = kernel_cells(kernel for _name, kernel in keys)
    rows = [
        (f"{name_cell(name)} [{kernels[kernel]}]",
         str(old.get((name, kernel), 0)), "->", str(new.get((name, kernel), 0)))
        for name, kernel in keys
        if old.get((name, kernel), 0) != new.get((name, kernel), 0)
    ]  # fmt: skip
    if not rows:
        return ""
    heading = (
        f"kname profile diff: launches per call site and kernel, {printable(labels[0])} -> "
        f"{printable(labels[1])}: "
        f"{count_of(len(rows), 'change')}"
    )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        f"{r[0].ljust(widths[0])}  {r[1].rjust(widths[1])} {r[2]} {r[3].rjust(widths[3])}"
        for r in rows
    ]
    return heading + "\n" + "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Comparison:
    """Two documents of one schema compared under the options given: the text and the page are
    both drawn from it, so they list the same changes in the same words."""

    before: Mapping[str, Any]
    after: Mapping[str, Any]
    labels: tuple[str, str]
    ignore_lines: bool = False  # censuses only
    threshold: float = DEFAULT_THRESHOLD  # profiles only, as min_time_ns
    min_time_ns: int = DEFAULT_MIN_TIME_NS

    @property
    def is_profile(self) -> bool:
        """GPU profiles (schema 2), compared by GPU time; else censuses, by launches."""
        return self.before["schema"] == PROFILE_SCHEMA

    def changes(self) -> list[Change] | list[GpuChange]:
        """What differs: per call site and kernel (censuses), per call site (profiles)."""
        if not self.is_profile:
            return compare(self.before, self.after, self.ignore_lines)
        changes = compare_gpu(self.before, self.after, self.threshold, self.min_time_ns)
        return [c for c in changes if c.kind != "same"]

    def counted(self) -> str:
        """`1 slower, 2 added`, or that nothing changed: the summary the text and the page print."""
        if self.is_profile:
            return kinds_of(self.changes(), PROFILE_KINDS) or NO_PROFILE_CHANGE
        return kinds_of(self.changes(), CENSUS_KINDS) or NO_CENSUS_CHANGE

    def values(self, document: Mapping[str, Any]) -> dict[str, int]:
        """{call site: GPU time (profiles), launches summed over kernels (censuses)}."""
        if self.is_profile:
            return {site["name"]: site["gpu_ns"] for site in document["sites"]}
        values: dict[str, int] = {}
        for (name, _kernel), launches in launch_counts(document, self.ignore_lines).items():
            values[name] = values.get(name, 0) + launches
        return values

    def text(self) -> str:
        """The text `kname report --diff` prints."""
        if not self.is_profile:
            return render_diff(self.before, self.after, self.labels, self.ignore_lines)
        return (
            render_gpu_diff(self.before, self.after, self.labels, self.threshold, self.min_time_ns)
            + render_count_changes(self.before, self.after, self.labels)
            + "".join(f"{line}\n" for line in memory_diff_lines(self.before, self.after))
        )


def slower(changes: list[GpuChange]) -> list[GpuChange]:
    """The changes that fail `--fail-on-slower`."""
    return [c for c in changes if c.kind == "slower"]


def _verdict_note(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    """`  (now launch-bound)` where a site's verdict changed (verdict.py), else ""."""
    changed = verdict_change(before, after)
    return f"  ({changed})" if changed else ""


def _judged(change: GpuChange, threshold: float, min_time_ns: int) -> GpuChange:
    if is_slower(change.before_ns, change.after_ns, threshold, min_time_ns):
        kind = "slower"
    elif is_slower(change.after_ns, change.before_ns, threshold, min_time_ns):
        kind = "faster"
    else:
        kind = "same"
    return dataclasses.replace(change, kind=kind)


def _row(c: GpuChange) -> tuple[str, ...]:
    if c.before_ns:
        relative = f"({100 * (c.after_ns - c.before_ns) / c.before_ns:+.1f}%)"
    else:
        relative = "(new)" if c.after_ns else ""
    launches = f"{count_of(c.before_launches, 'launch')} -> {c.after_launches}"
    return (
        c.kind if c.name != TOTAL else f"total {c.kind}",
        name_cell(c.name) + c.note,
        format_duration(c.before_ns),
        "->",
        format_duration(c.after_ns),
        relative,
        launches,
    )
