"""kname.counters: launch counts per (call-site name, kernel, library), what the census reads.

In-process, on the counters of each hot path (itertools.count on the Python one, the C Counter on
the native one): the wrappers' own counting through them is tested in test_launch.py and
test_native.py, a forked child's in test_reliability_concurrency.py.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname import counters, hotpath, ranges

pytestmark = pytest.mark.launches

STEP = ("step app.py:3", "axpy", "numba")
MAIN = ("main app.py:9", "axpy", "numba")
SCALE = ("step app.py:4", "scale", "numba")
OVERFLOW = (ranges.OVERFLOW_NAME, "", "")


def launch(counter, times: int = 1) -> None:
    """Count `times` launches, as the launch wrapper does."""
    for _ in range(times):
        next(counter)


def test_a_name_has_one_counter_made_at_its_first_launch_of_the_hot_path_in_effect() -> None:
    counter = counters.counter_for(*STEP)
    assert counters.counter_for(*STEP) is counter
    assert hotpath.is_counter(counter)
    assert type(counter) is type(hotpath.current().counter())
    launch(counter, 3)
    assert counters.value(counter) == 3
    assert counters.counts() == {STEP: 3}


def test_counts_are_in_first_seen_order_and_leave_out_names_never_launched() -> None:
    step, main, scale = (counters.counter_for(*key) for key in (STEP, MAIN, SCALE))
    launch(scale, 2)
    launch(step)
    assert list(counters.counts().items()) == [(STEP, 1), (SCALE, 2)]
    launch(main, 4)
    assert list(counters.counts()) == [STEP, MAIN, SCALE]


def test_past_the_bound_new_names_share_one_counter_and_older_ones_keep_theirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(counters, "MAX_COUNTED", 2)
    step, main = counters.counter_for(*STEP), counters.counter_for(*MAIN)
    over = counters.counter_for(*SCALE)
    assert counters.counter_for("f b.py:1", "k", "cupy") is over
    assert counters.counter_for(*STEP) is step and over not in (step, main)
    launch(over, 5)
    launch(step)
    assert counters.counts() == {STEP: 1, OVERFLOW: 5}


def test_launches_at_the_recursion_limit_are_a_row_of_their_own() -> None:
    launch(counters.at_recursion_limit, 2)
    assert counters.counts() == {(counters.AT_RECURSION_LIMIT, "", ""): 2}


def test_clear_forgets_every_count() -> None:
    launch(counters.counter_for(*STEP))
    launch(counters.at_recursion_limit)
    counters.clear()
    assert counters.counts() == {}
    assert counters.counter_for(*STEP) is not None and counters.counts() == {}


def test_starting_from_zero_renews_every_counter_and_a_shared_one_stays_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What a forked child does: the parent's launches are the parent's to report.
    monkeypatch.setattr(counters, "MAX_COUNTED", 1)
    step, over = counters.counter_for(*STEP), counters.counter_for(*MAIN)
    assert counters.counter_for(*SCALE) is over
    launch(step, 2)
    launch(over, 3)
    launch(counters.at_recursion_limit)
    renewed = counters.start_from_zero()
    assert set(renewed) == {step, over}
    assert counters.counts() == {}
    assert counters.counter_for(*STEP) is renewed[step]
    launch(renewed[over])
    assert counters.counts() == {OVERFLOW: 1}
    assert counters.value(step) == 2  # the parent's counters are left as they were


@given(st.integers(min_value=0, max_value=2**80))
def test_the_value_of_a_python_counter_is_its_next_number_however_large(start: int) -> None:
    # itertools.count shows its next value only in its repr: value() reads it from there.
    assert counters.value(itertools.count(start)) == start
