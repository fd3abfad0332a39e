"""kname.stretch: the census of one stretch (a cell, a test body) as the difference of two
snapshots of the launch counts. Pure functions, in-process."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kname import stretch
from kname.documents.schema import validate

counts = st.integers(min_value=0, max_value=10**6)
keys = st.tuples(st.sampled_from(["step a.py:1", "main a.py:2", "f b.py:3"]),
                 st.sampled_from(["axpy", "scale"]), st.just("numba"))  # fmt: skip


@given(st.dictionaries(keys, st.tuples(counts, counts), max_size=6))
def test_a_difference_counts_exactly_the_launches_added_meanwhile(grown) -> None:
    before = {key: {"launches": old} for key, (old, _) in grown.items()}
    after = {key: {"launches": old + new} for key, (old, new) in grown.items()}
    result = validate(stretch.difference(before, after), "difference")
    added = {key: new for key, (_, new) in grown.items() if new}
    assert {(s["name"], s["kernel"], s["lib"]): s["launches"] for s in result["sites"]} == added
    assert result["total_launches"] == sum(added.values())
    assert [s["order"] for s in result["sites"]] == list(range(1, len(added) + 1))


def test_a_difference_subtracts_gpu_time_too() -> None:
    key = ("step a.py:1", "axpy", "numba")
    result = stretch.difference(
        {key: {"launches": 2, "gpu_ns": 500}}, {key: {"launches": 5, "gpu_ns": 2000}}
    )
    assert result["sites"][0]["launches"] == 3 and result["sites"][0]["gpu_ns"] == 1500
