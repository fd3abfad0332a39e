"""A site's numbers across the ranks of a merged document: the spread, and the straggler.

A merged document keeps each rank's numbers per site (schema.py, `by_rank`). The spread of a
site is the least, the median and the most of its GPU time (a census: its launches) over the
ranks, with the rank that had the most, the slowest; a rank where the site never ran counts 0.
A site has a straggler when its slowest rank takes more than a threshold (a fraction of the
median) over the median, and at least `min_time_ns` over it, so that jitter on tiny kernels
does not fail a CI job (as diff.py judges a slower site).

A profile's spread is of each rank's own work: its GPU time less the time its NCCL kernels at
the site waited for slower ranks (collectives.py: the excess over the least rank's collective
time). A fast rank's all_reduce line, mostly waiting, is then no straggler; the slow rank is
named at the line where it did more work.

A merge keeps a site's per-rank numbers as `RankValues`: a read-only list, in rank order, that
stores only the ranks where the site ran when it ran on fewer than half of them, so that
merging files whose sites differ per rank takes memory in proportion to the sites read, not to
ranks times sites. The spread is computed from what is stored.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, overload

from kname.documents.collectives import split_waiting
from kname.documents.schema import BY_RANK, COLLECTIVE_NS, PROFILE_SCHEMA, RANKS

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


def slowest_rank(spread: Spread) -> str:
    """`rank 3`, the rank with the most, or `all equal` where no rank has more than another."""
    return "all equal" if spread.low == spread.high else f"rank {spread.slowest}"


class RankValues(Sequence[int]):
    """A site's values on each rank, in rank order, 0 where it never ran: dense (a value per
    rank) or sparse (the positions where it ran, ascending, and a value at each)."""

    __slots__ = ("_positions", "_size", "_values")

    def __init__(self, values: array, size: int, positions: array | None = None) -> None:
        self._values = values
        self._size = size
        self._positions = positions  # None: dense, len(values) == size

    def stored(self) -> tuple[array | None, array]:
        """(positions, values): the positions are None where every rank's value is stored."""
        return self._positions, self._values

    def entries(self) -> Iterator[tuple[int, int]]:
        """(position, value) for each value stored (zeros may be among them)."""
        if self._positions is None:
            return enumerate(self._values)
        return zip(self._positions, self._values, strict=True)

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return list(self)[index]
        if self._positions is None:
            return self._values[index]
        position = range(self._size)[index]  # IndexError as a list's, negatives counted back
        found = bisect_left(self._positions, position)
        if found < len(self._positions) and self._positions[found] == position:
            return self._values[found]
        return 0

    def __iter__(self) -> Iterator[int]:
        if self._positions is None:
            return iter(self._values)
        return self._dense()

    def _dense(self) -> Iterator[int]:
        at = 0
        for position, value in zip(self._positions, self._values, strict=True):
            yield from repeat(0, position - at)
            yield value
            at = position + 1
        yield from repeat(0, self._size - at)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._size and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  (a list's equality: not hashable)

    def __repr__(self) -> str:
        return f"RankValues({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (RankValues, (self._values, self._size, self._positions))


def ranks_of(document: Mapping[str, Any]) -> list[int]:
    """The ranks a document holds numbers for, in its order ([] for a document of no rank)."""
    return [record["rank"] for record in document.get(RANKS, ())]


def metric_of(document: Mapping[str, Any]) -> str:
    """What the spread is of: a profile's GPU time, a census's launches."""
    return "gpu_ns" if document["schema"] == PROFILE_SCHEMA else "launches"


def spread_of(values: Sequence[int], ranks: Sequence[int]) -> Spread:
    """The spread of per-rank `values` (aligned with `ranks`, at least one; whole numbers
    >= 0 where they are RankValues)."""
    positions, stored = values.stored() if isinstance(values, RankValues) else (None, values)
    if positions is None:
        # One sort gives the least, the median and the most (min() and max() over an array of
        # 1,024 ranks each took longer than sorting it: every value is made an int to compare).
        ordered = sorted(stored)
        high = ordered[-1]
        slowest = ranks[stored.index(high)]  # ranks are in order: the first is the lowest
        return Spread(ordered[0], _median_of_sorted(ordered), high, slowest)
    return _sparse_spread(positions, stored, ranks)


def _median_of_sorted(ordered: Sequence[int]) -> float:
    """The median of values in ascending order (statistics.median's, without its sort)."""
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _sparse_spread(positions: array, stored: array, ranks: Sequence[int]) -> Spread:
    """The spread of values stored at `positions` of len(ranks), 0 elsewhere (at least one)."""
    zeros = len(ranks) - len(stored)
    ordered = sorted(stored)
    high = ordered[-1] if ordered else 0
    # Of equal values the first rank's, as a list's index() picks (every rank 0: the first).
    slowest = ranks[positions[stored.index(high)]] if high else ranks[0]

    def nth(index: int) -> int:  # the index-th smallest of all len(ranks) values
        return 0 if index < zeros else ordered[index - zeros]

    middle = len(ranks) // 2
    median = nth(middle) if len(ranks) % 2 else (nth(middle - 1) + nth(middle)) / 2
    return Spread(nth(0), median, high, slowest)


def spreads(document: Mapping[str, Any]) -> dict[int, Spread]:
    """{index of a site in document["sites"]: its spread}, for a document of several ranks
    ({} otherwise)."""
    ranks = ranks_of(document)
    if len(ranks) < 2:
        return {}
    metric = metric_of(document)
    return {
        index: spread_of(own_work(site, metric), ranks)
        for index, site in enumerate(document["sites"])
    }


def waiting_of(site: Mapping[str, Any]) -> list[int] | None:
    """A merged profile site's time on each rank waiting in collectives for slower ranks; None
    where it has no NCCL kernels (no collective time by rank)."""
    per_rank = site.get(BY_RANK)
    if per_rank is None or COLLECTIVE_NS not in per_rank:
        return None
    return split_waiting(per_rank[COLLECTIVE_NS])[1]


def own_work(site: Mapping[str, Any], metric: str) -> Sequence[int]:
    """A merged site's `metric` on each rank; GPU time less the rank's waiting (waiting_of)."""
    values = site[BY_RANK][metric]
    waiting = waiting_of(site) if metric == "gpu_ns" else None
    if not waiting or not any(waiting):
        return values
    return list(map(operator.sub, values, waiting))  # both one per rank


def is_straggler(spread: Spread, threshold: float, min_time_ns: int = DEFAULT_MIN_TIME_NS) -> bool:
    """The slowest rank is over the median by more than `threshold` of it, and by at least
    `min_time_ns`."""
    over = spread.high - spread.median
    return over > 0 and over >= min_time_ns and over > threshold * spread.median


def stragglers(
    document: Mapping[str, Any], threshold: float, min_time_ns: int = DEFAULT_MIN_TIME_NS
) -> list[tuple[Mapping[str, Any], Spread]]:
    """Each site with a straggler (of a profile or a census), with its spread, in the
    document's order."""
    sites = document["sites"]
    return [
        (sites[index], spread)
        for index, spread in spreads(document).items()
        if is_straggler(spread, threshold, min_time_ns)
    ]
