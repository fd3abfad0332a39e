"""A site's numbers across the ranks of a merged document (kname.documents.spread): the least,
median and most, the slowest rank, and when that rank is a straggler."""

from __future__ import annotations

import statistics
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.profile_streams import profile_of

from kname.documents.build import profile_document
from kname.documents.merge import merge_documents
from kname.documents.spread import (
    RankValues,
    Spread,
    is_straggler,
    spread_of,
    spreads,
    stragglers,
)
from kname.profiling.join import replay
from kname.profiling.records import load_streams
from kname.ranks import Rank, meta

per_rank = st.lists(st.integers(0, 10**12), min_size=1, max_size=64)
# Values of a site that ran on few ranks: mostly 0.
mostly_zero = st.lists(st.one_of(st.just(0), st.integers(0, 10**6)), min_size=1, max_size=64)


@given(mostly_zero)
def test_values_stored_for_the_ranks_a_site_ran_on_read_and_spread_as_the_whole_list(values):
    positions = array("q", [position for position, value in enumerate(values) if value])
    stored = RankValues(array("q", [value for value in values if value]), len(values), positions)
    assert list(stored) == values and stored == values and values == stored
    assert [stored[i] for i in range(-len(values), len(values))] == values + values
    assert stored[1:3] == values[1:3] and len(stored) == len(values)
    ranks = [2 * index + 1 for index in range(len(values))]
    assert spread_of(stored, ranks) == spread_of(values, ranks)
    dense = RankValues(array("q", values), len(values))
    assert dense == stored and spread_of(dense, ranks) == spread_of(values, ranks)


@given(per_rank)
def test_the_spread_is_the_least_median_and_most_and_the_slowest_has_the_most(values) -> None:
    ranks = [3 * index for index in range(len(values))]  # ranks need not be 0, 1, 2, ...
    spread = spread_of(values, ranks)
    assert spread.low <= spread.median <= spread.high
    assert (spread.low, spread.high) == (min(values), max(values))
    assert spread.median == statistics.median(values)
    assert values[ranks.index(spread.slowest)] == spread.high
    assert spread.slowest == ranks[values.index(max(values))]  # of two, the lower rank


@given(per_rank, st.floats(0, 10), st.integers(0, 10**6))
def test_a_straggler_is_over_the_median_by_more_than_the_threshold_and_the_minimum(
    values, threshold, minimum
) -> None:
    spread = spread_of(values, list(range(len(values))))
    over = spread.high - spread.median
    expected = over > threshold * spread.median and over >= minimum and over > 0
    assert is_straggler(spread, threshold, minimum) is expected


@given(per_rank, st.integers(1, 1000))
def test_a_job_whose_ranks_all_take_the_same_has_no_straggler(values, scale) -> None:
    even = spread_of([scale] * len(values), list(range(len(values))))
    assert not is_straggler(even, 0.0, 0) and even.excess == 0.0


def test_the_excess_is_a_fraction_of_the_median_or_infinite_over_a_median_of_zero() -> None:
    assert Spread(10, 10, 15, 2).excess == pytest.approx(0.5)
    assert Spread(0, 0, 90, 0).excess == float("inf")


def test_a_merged_profiles_spreads_and_stragglers_are_those_of_its_sites() -> None:
    parts = []
    for rank, gpu_ns in enumerate([100_000, 100_000, 400_000]):
        document = profile_document(profile_of({"step app.py:1": ("k", 1, gpu_ns)}))
        record = meta(Rank(rank, rank, 3, "openmpi"), host="n", pid=rank)
        parts.append({**document, "ranks": [record]})
    merged = merge_documents(parts)
    assert spreads(merged) == {0: Spread(100_000, 100_000, 400_000, 2)}
    ((site, spread),) = stragglers(merged, 0.2)
    assert site["name"] == "step app.py:1" and spread.slowest == 2
    assert stragglers(merged, 3.5) == []
    assert spreads(parts[0]) == {}  # one rank: no spread


# --- the recorded H200 profile as each rank's -------------------------------------------------

RECORDED = profile_document(
    replay(load_streams(str(Path(__file__).parent.parent / "data" / "profile_h200.json")))
)
# How many times each rank of a job ran the recorded program (each run a file of its own).
runs_per_rank = st.lists(st.integers(1, 4), min_size=2, max_size=8)
# Odd twentieths: never the slowest rank's excess exactly (a ratio of runs of at most 4), where
# rounding could tip the comparison either way.
thresholds = st.integers(0, 60).map(lambda k: (2 * k + 1) / 20)


@settings(max_examples=50, deadline=None)
@given(runs_per_rank, st.randoms(use_true_random=False), thresholds)
def test_ranks_that_ran_the_recorded_profile_m_times_spread_as_m_times_each_sites_time(
    runs, shuffle, threshold
) -> None:
    world = len(runs)
    files = [
        {**RECORDED, "ranks": [meta(Rank(rank, rank, world, "torchrun"), host="n", pid=run)]}
        for rank, count in enumerate(runs)
        for run in range(count)
    ]
    shuffle.shuffle(files)  # the files come in any order
    merged = merge_documents(files)
    assert merged["total_gpu_ns"] == sum(runs) * RECORDED["total_gpu_ns"]
    assert merged["processes"] == len(files)
    gpu_ns = {site["name"]: site["gpu_ns"] for site in RECORDED["sites"]}
    slowest = runs.index(max(runs))  # of two ranks with the most runs, the lower
    expected = {
        name: Spread(min(runs) * ns, statistics.median(runs) * ns, max(runs) * ns, slowest)
        for name, ns in gpu_ns.items()
    }
    sites = merged["sites"]
    assert {sites[index]["name"]: spread for index, spread in spreads(merged).items()} == expected
    # Every site is as much slower on the slowest rank: all straggle, or none does.
    over = max(runs) - statistics.median(runs)
    flagged = [site["name"] for site, _ in stragglers(merged, threshold, min_time_ns=0)]
    assert sorted(flagged) == (sorted(gpu_ns) if over > threshold * statistics.median(runs) else [])
