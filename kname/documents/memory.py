"""Memory per line in a profile (`kname profile --memory`): its fields made, merged, compared
and shown in the table (the layout is schema.py's; the accounting profiling/memory.py's).

A line's memory is shown from one view: a pool's (torch, CuPy) where the line allocated through
one, since the driver only sees the pool's segments; else the driver's `device` view. Views
are never added together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from kname.documents.schema import MAX_TIMELINE, MEMORY, MEMORY_SITE_FIELDS
from kname.documents.text import printable

POOL_VIEWS = ("torch", "cupy")  # the pools' own views, first in a line's shown view
DRIVER_VIEWS = ("device", "pinned")
SUMMED = ("allocated", "allocations", "freed", "frees")  # merged by sum; peaks by the highest
MEMORY_HEADER = ("allocated", "peak held")
DEFAULT_MIN_BYTES = 1 << 20  # --fail-on-more-memory: smaller growth is never more memory


class LedgerLike(Protocol):
    """What profiling.memory.Ledger gives the document."""

    def site_dicts(self) -> dict[str, dict[str, int]]: ...

    def view_dict(self) -> dict[str, object]: ...


def with_memory(document: dict[str, Any], ledgers: Mapping[str, LedgerLike]) -> dict[str, Any]:
    """`document` (a profile) with each site's `memory` and the document's, from `ledgers`
    ({view: Ledger}); a line that allocated and launched nothing becomes a site of 0 launches."""
    if not ledgers:
        return document
    sites = {site["name"]: site for site in document["sites"]}
    for view, ledger in sorted(ledgers.items()):
        for name, numbers in ledger.site_dicts().items():
            site = sites.get(name)
            if site is None:
                site = sites[name] = _memory_only_site(name, len(sites) + 1)
                document["sites"].append(site)
            site.setdefault(MEMORY, {})[view] = numbers
    document[MEMORY] = {view: ledger.view_dict() for view, ledger in sorted(ledgers.items())}
    return document


def _memory_only_site(name: str, order: int) -> dict[str, Any]:
    return {
        "name": name, "kernel": "", "lib": "", "launches": 0, "gpu_ns": 0, "share": 0.0,
        "order": order, "kernels": {},
    }  # fmt: skip


def shown_view(site: Mapping[str, Any]) -> str | None:
    """The view a site's memory is shown from (see the module's docstring); None: no memory."""
    views = site.get(MEMORY) or {}
    return next((v for v in (*POOL_VIEWS, *DRIVER_VIEWS, *sorted(views)) if v in views), None)


def memory_cells(site: Mapping[str, Any]) -> tuple[str, str]:
    """The table's two cells of a site: bytes allocated, and held at the view's peak (its own
    peak after a slash where higher), the view named when it is a pool's."""
    view = shown_view(site)
    if view is None:
        return "", ""
    numbers = site[MEMORY][view]
    held = format_bytes(numbers["at_peak"])
    if numbers["peak"] > numbers["at_peak"]:
        held += f" / {format_bytes(numbers['peak'])}"
    mark = f" ({view})" if view in POOL_VIEWS else ""
    return format_bytes(numbers["allocated"]) + mark, held


def has_memory(document: Mapping[str, Any]) -> bool:
    """Whether a profile measured memory."""
    return MEMORY in document


def format_bytes(count: int) -> str:
    """`0`, `512 B`, `3.0 KiB`, `16.0 MiB`, `1.50 GiB`."""
    if count < 1024:
        return f"{count} B" if count else "0"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            value = count / size
            return f"{value:.2f} {unit}" if unit == "GiB" else f"{value:.1f} {unit}"
    return f"{count} B"  # not reached


def peak_line(document: Mapping[str, Any], view: str) -> str | None:
    """The site that held the most at `view`'s peak (ties: the first by name)."""
    held = [
        (-site[MEMORY][view]["at_peak"], site["name"])
        for site in document["sites"]
        if view in site.get(MEMORY, {}) and site[MEMORY][view]["at_peak"]
    ]
    return min(held)[1] if held else None


def memory_peak_lines(document: Mapping[str, Any]) -> list[str]:
    """Under the table: each view's peak, and the line holding the most there."""
    lines = []
    for view, numbers in document.get(MEMORY, {}).items():
        line = peak_line(document, view)
        held = f", most held by {cut_name(line)}" if line else ""
        frees = numbers["unmatched_frees"]
        unmatched = f"; {frees} frees of memory allocated before" if frees else ""
        lines.append(f"memory peak ({view}): {format_bytes(numbers['peak'])}{held}{unmatched}")
    return lines


def cut_name(name: str, width: int = 120) -> str:
    """A line's name for one line of text: printable, at most `width` characters."""
    text = printable(name)
    return text if len(text) <= width else text[: width - 3] + "..."


# --- merging (documents/merge.py calls these) ---------------------------------------------------


class MemoryMerge:
    """Memory fields of documents folded in: a site's sums (and highest peaks) per view, and
    per view the process-wide numbers of the document with the highest peak."""

    def __init__(self) -> None:
        self.sites: dict[str, dict[str, dict[str, int]]] = {}
        self.views: dict[str, dict[str, Any]] = {}

    def add(self, document: Mapping[str, Any]) -> None:
        """Fold a valid profile's memory fields in."""
        for site in document["sites"]:
            if MEMORY in site:
                self._add_site(site["name"], site[MEMORY])
        for view, numbers in document.get(MEMORY, {}).items():
            self._add_view(view, numbers)

    def absorb(self, other: MemoryMerge) -> None:
        """Fold in another MemoryMerge (a worker's share of the files)."""
        for name, views in other.sites.items():
            self._add_site(name, views)
        for view, numbers in other.views.items():
            self._add_view(view, numbers)

    def into(self, document: dict[str, Any]) -> dict[str, Any]:
        """The merged fields put in the merged `document` (whose sites hold every name)."""
        if not self.views and not self.sites:
            return document
        for site in document["sites"]:
            views = self.sites.get(site["name"])
            if views:
                site[MEMORY] = {view: dict(numbers) for view, numbers in sorted(views.items())}
        document[MEMORY] = {view: dict(numbers) for view, numbers in sorted(self.views.items())}
        return document

    def _add_site(self, name: str, views: Mapping[str, Mapping[str, int]]) -> None:
        mine = self.sites.setdefault(name, {})
        for view, numbers in views.items():
            kept = mine.get(view)
            if kept is None:
                mine[view] = {field: numbers[field] for field in MEMORY_SITE_FIELDS}
                continue
            for field in SUMMED:
                kept[field] += numbers[field]
            kept["peak"] = max(kept["peak"], numbers["peak"])
            kept["at_peak"] = max(kept["at_peak"], numbers["at_peak"])

    def _add_view(self, view: str, numbers: Mapping[str, Any]) -> None:
        kept = self.views.get(view)
        if kept is None or numbers["peak"] > kept["peak"]:
            timeline = [list(point) for point in numbers["timeline"][:MAX_TIMELINE]]
            self.views[view] = dict(numbers) | {"timeline": timeline}


# --- comparing (kname report --diff --fail-on-more-memory) --------------------------------------


def more_memory(
    before: Mapping[str, Any], after: Mapping[str, Any], threshold: float, min_bytes: int
) -> list[tuple[str, int, int]]:
    """The views whose process peak grew by more than `threshold` (0.1: 10%) and at least
    `min_bytes`: [(view, peak before, peak after)]. A view only in `after` grew from 0."""
    grown = []
    views_before = before.get(MEMORY, {})
    for view, numbers in sorted(after.get(MEMORY, {}).items()):
        was = views_before.get(view, {}).get("peak", 0)
        now = numbers["peak"]
        if now - was >= min_bytes and now > was * (1 + threshold):
            grown.append((view, was, now))
    return grown


def memory_diff_lines(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """One line per view measured in either: its peak before and after, and the line holding
    the most there after."""
    lines = []
    views = sorted(set(before.get(MEMORY, {})) | set(after.get(MEMORY, {})))
    for view in views:
        was = before.get(MEMORY, {}).get(view, {}).get("peak", 0)
        now = after.get(MEMORY, {}).get(view, {}).get("peak", 0)
        line = peak_line(after, view)
        held = f" (most held at the peak by {cut_name(line)})" if line else ""
        lines.append(
            f"memory peak ({view}): {format_bytes(was)} -> {format_bytes(now)}"
            f" ({_signed(now - was)}){held}"
        )
    return lines


def _signed(change: int) -> str:
    return ("+" if change >= 0 else "-") + format_bytes(abs(change))
