"""The launches of one stretch of a program (a notebook cell, a test's body): census after
minus census before. kname's own counts are never reset, so other views of them stay whole.

Counts are process-wide: launches made meanwhile by other threads are in the stretch too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kname import counters
from kname._version import __version__
from kname.census import census
from kname.census_view import Census
from kname.documents.schema import CENSUS_SCHEMA

Key = tuple[str, str, str]  # (call-site name, kernel, library)
# Fields of a site that add up over time, so a stretch has its own share of them. gpu_ns is
# there once a profiler fills it in (issue 14).
ADDITIVE = ("launches", "gpu_ns")


def take() -> dict[Key, dict[str, int]]:
    """The census now: {(name, kernel, lib): {"launches": n, ...}}, in first-seen order."""
    counters.read_from_now_on()  # a profile keeps counting every launch (its wrappers stay)
    return {
        (site["name"], site["kernel"], site["lib"]): {f: site[f] for f in ADDITIVE if f in site}
        for site in census()["sites"]
    }


def since(before: Mapping[Key, Mapping[str, int]]) -> dict[str, Any]:
    """The launches since `before` (a `take()`), as a census document of schema 1."""
    return difference(before, take())


def difference(
    before: Mapping[Key, Mapping[str, int]], after: Mapping[Key, Mapping[str, int]]
) -> dict[str, Any]:
    """`after` minus `before`, as a census document; sites with no new launch are left out."""
    grown = []
    for key, counts in after.items():
        earlier = before.get(key, {})
        added = {f: counts[f] - earlier.get(f, 0) for f in counts}
        # Negative only if kname's bounded cache retired the site meanwhile: nothing new there.
        if added.get("launches", 0) > 0:
            grown.append((key, added))
    total = sum(added["launches"] for _, added in grown)
    sites = [
        {
            "name": name,
            "kernel": kernel,
            "lib": lib,
            "launches": added["launches"],
            "share": round(added["launches"] / total, 6),
            "order": order,
            **{f: v for f, v in added.items() if f != "launches"},
        }
        for order, ((name, kernel, lib), added) in enumerate(grown, 1)
    ]
    return {"kname": __version__, "schema": CENSUS_SCHEMA, "sites": sites, "total_launches": total}


class Stretch:
    """Launches since `restart()` (or creation), read live: `.launches("step")`, `.census()`."""

    def __init__(self, title: str = "kname census") -> None:
        self.title = title
        self.restart()

    def restart(self) -> None:
        """Count from now on."""
        self._before = take()

    def census(self) -> Census:
        """The launches so far in this stretch."""
        return Census(since(self._before), self.title)

    def launches(self, name: str | None = None, *, kernel: str | None = None) -> int:
        """Launches so far from the sites `name` and `kernel` pick (see Census.launches)."""
        return self.census().launches(name, kernel=kernel)

    def names(self) -> dict[str, int]:
        """{call-site name: launches} so far in this stretch."""
        return self.census().names()

    def __str__(self) -> str:
        return str(self.census())

    def __repr__(self) -> str:
        return repr(self.census())
