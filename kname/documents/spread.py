"""A site's numbers across the ranks of a merged document: the spread, and the straggler.

A merged document keeps each rank's numbers per site (schema.py, `by_rank`). The spread of a
site is the least, the median and the most of its GPU time (a census: its launches) over the
ranks, with the rank that had the most, the slowest; a rank where the site never ran counts 0.
A site has a straggler when its slowest rank takes more than a threshold (a fraction of the
median) over the median, and at least `min_time_ns` over it, so that jitter on tiny kernels
does not fail a CI job (as diff.py judges a slower site).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kname.documents.schema import BY_RANK, PROFILE_SCHEMA, RANKS

DEFAULT_MIN_TIME_NS = 50_000  # as diff.py's: smaller excess is never a straggler


@dataclass(frozen=True)
class Spread:
    """One site's value over the ranks."""

    low: int
    median: float
    high: int
    slowest: int  # the rank with the most (of two, the lower rank)

    @property
    def excess(self) -> float:
        """How much the slowest rank has over the median, as a fraction of the median (inf
        when the median is 0 and the slowest has anything)."""
        over = self.high - self.median
        if not over:
            return 0.0
        return over / self.median if self.median else float("inf")


def ranks_of(document: Mapping[str, Any]) -> list[int]:
    """The ranks a document holds numbers for, in its order ([] for a document of no rank)."""
    return [record["rank"] for record in document.get(RANKS, ())]


def metric_of(document: Mapping[str, Any]) -> str:
    """What the spread is of: a profile's GPU time, a census's launches."""
    return "gpu_ns" if document["schema"] == PROFILE_SCHEMA else "launches"


def spread_of(values: Sequence[int], ranks: Sequence[int]) -> Spread:
    """The spread of per-rank `values` (aligned with `ranks`, at least one)."""
    high = max(values)
    slowest = ranks[values.index(high)]  # ranks are in order: the first is the lowest
    return Spread(min(values), statistics.median(values), high, slowest)


def spreads(document: Mapping[str, Any]) -> dict[int, Spread]:
    """{index of a site in document["sites"]: its spread}, for a document of several ranks
    ({} otherwise)."""
    ranks = ranks_of(document)
    if len(ranks) < 2:
        return {}
    metric = metric_of(document)
    return {
        index: spread_of(site[BY_RANK][metric], ranks)
        for index, site in enumerate(document["sites"])
    }


def is_straggler(spread: Spread, threshold: float, min_time_ns: int = DEFAULT_MIN_TIME_NS) -> bool:
    """The slowest rank is over the median by more than `threshold` of it, and by at least
    `min_time_ns`."""
    over = spread.high - spread.median
    return over > 0 and over >= min_time_ns and over > threshold * spread.median


def stragglers(
    document: Mapping[str, Any], threshold: float, min_time_ns: int = DEFAULT_MIN_TIME_NS
) -> list[tuple[Mapping[str, Any], Spread]]:
    """Each site of a profile with a straggler, with its spread, in the document's order."""
    sites = document["sites"]
    return [
        (sites[index], spread)
        for index, spread in spreads(document).items()
        if is_straggler(spread, threshold, min_time_ns)
    ]
