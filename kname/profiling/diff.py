"""GPU time per call site, before and after: which sites got slower (`--fail-on-slower 10%`).

A site counts as slower when its GPU time grew by more than the threshold (a fraction of its old
time) AND by at least `min_time_ns` (default 50 µs). The second condition keeps run-to-run noise
on tiny kernels (a few µs each, jittering by a µs) from failing a CI job. Faster is the mirror
image: slower with before and after swapped. The total GPU time is judged by the same rule, so a
regression still shows when lines moved and every site was renamed (added and removed sites are
listed, never counted as slower themselves). Names and labels are printed through
census_file.printable, as in the table.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kname.census_file import columns, count_of, printable
from kname.profiling.document import launch_counts
from kname.profiling.kernel_names import display_name
from kname.profiling.table import format_duration

DEFAULT_MIN_TIME_NS = 50_000
DEFAULT_THRESHOLD = 0.10  # what a diff calls slower or faster when --fail-on-slower is not given
TOTAL = "<total GPU time>"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)?\s*$")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class GpuChange:
    """How one call site's GPU time compares between two profiles."""

    kind: str  # "slower", "faster", "same", "added" or "removed"
    name: str
    before_ns: int
    after_ns: int
    before_launches: int
    after_launches: int


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
    kinds = ", ".join(
        f"{sum(c.kind == kind for c in shown)} {kind}"
        for kind in ("slower", "faster", "added", "removed")
        if any(c.kind == kind for c in shown)
    )
    rule = f"threshold {100 * threshold:g}% and {format_duration(min_time_ns)}"
    heading = (
        f"kname profile diff: {printable(labels[0])} ({format_duration(total.before_ns)}) -> "
        f"{printable(labels[1])} "
        f"({format_duration(total.after_ns)}), {rule}: {kinds or 'no site slower or faster'}"
    )
    rows = [_row(c) for c in [total, *shown]]
    return heading + "\n" + columns(rows, right_aligned=(2, 4, 5)) if rows else heading + "\n"


def render_count_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], labels: tuple[str, str]
) -> str:
    """Launches per call site and kernel that differ, one line each ("" when none differ)."""
    old, new = launch_counts(before), launch_counts(after)
    keys = [*new, *(key for key in old if key not in new)]
    rows = [
        (f"{printable(name)} [{printable(display_name(kernel))}]",
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


def slower(changes: list[GpuChange]) -> list[GpuChange]:
    """The changes that fail `--fail-on-slower`."""
    return [c for c in changes if c.kind == "slower"]


def parse_threshold(text: str) -> float:
    """`10%` or `10` -> 0.10: the --fail-on-slower argument; ValueError says what is accepted."""
    value = text.strip().removesuffix("%").strip()
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(
            f"--fail-on-slower {text!r}: expected a percentage such as 10% (or 10), 0 or more"
        )
    return number / 100


def parse_duration(text: str) -> int:
    """`50us`, `2ms`, `0` -> ns: the --min-time argument; ValueError says what is accepted."""
    match = _DURATION.match(text)
    if match is None or (match.group(2) is None and float(match.group(1)) != 0):
        raise ValueError(f"--min-time {text!r}: expected a duration such as 50us, 2ms, 1s or 0")
    return round(float(match.group(1)) * _UNITS[match.group(2) or "ns"])


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
        printable(c.name),
        format_duration(c.before_ns),
        "->",
        format_duration(c.after_ns),
        relative,
        launches,
    )
