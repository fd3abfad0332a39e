"""kname._native_cupti.Ledger (profiling/_cupti_c/ledger.c): memory.Ledger's accounting in C,
for the torch tracker's events. Held equal to the Python Ledger, event for event: the same
events into each, the C one's state() loaded into a Python Ledger (as TrackedBlocks does), and
every number a profile shows compared."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kname.profiling.memory import Ledger
from kname.profiling.memory_hooks import native_ledger

NativeLedger = native_ledger()
pytestmark = pytest.mark.skipif(NativeLedger is None, reason="kname._native_cupti not built")

SITES = st.sampled_from(["alloc a.py:1", "alloc a.py:2", "load b.py:7", "<unattributed>"])
SIZES = st.integers(min_value=0, max_value=1 << 40)
# (address slot, site or None for a free, size): slots stand for addresses, so that frees hit
# live blocks, freed ones and never-allocated ones, and allocations land on held addresses.
EVENTS = st.lists(st.tuples(st.integers(0, 9), st.one_of(st.none(), SITES), SIZES), max_size=80)


def as_events(drawn: list[tuple]) -> list[tuple[int, str | None, int, int]]:
    return [(0x200 * (slot + 1), site, time, size) for time, (slot, site, size) in enumerate(drawn)]


def both(events: list[tuple], batches: int, **bounds: int) -> tuple[Ledger, Ledger]:
    """(the Python ledger given `events`, one loaded from the C ledger given them in batches)."""
    python = Ledger(**bounds)
    python.take(events)
    native = NativeLedger(**bounds)
    loaded = Ledger(**bounds)
    size = max(1, -(-len(events) // batches))
    for start in range(0, max(len(events), 1), size):
        native.take(events[start : start + size])
        loaded.load(native.state())  # a settle: loaded after each batch, read after the last
    return python, loaded


def assert_same(python: Ledger, loaded: Ledger) -> None:
    assert loaded.site_dicts() == python.site_dicts()
    assert loaded.view_dict() == python.view_dict()
    assert loaded.peak_site() == python.peak_site()


@given(EVENTS, st.integers(1, 3), st.integers(1, 6), st.integers(0, 9))
def test_the_c_ledger_keeps_the_numbers_the_python_one_does(
    drawn, batches: int, max_points: int, max_blocks: int
) -> None:
    """Small bounds: the timeline halves, allocations past the blocks bound go untracked."""
    events = as_events(drawn)
    python, loaded = both(events, batches, max_points=max_points, max_blocks=max_blocks)
    assert_same(python, loaded)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_thousands_of_blocks_held_at_once_grow_the_table_and_free_back_out_of_it(seed) -> None:
    """Past the table's first 1,024 slots, and frees all through its runs (its deletions move
    blocks back along their probe): 6,000 addresses, half the events frees."""
    chance = random.Random(seed)
    sites = [f"site {n}.py:{n}" for n in range(40)]
    events = []
    for time in range(20_000):
        address = 0x7F00_0000_0000 + 512 * chance.randrange(6000)
        if chance.random() < 0.5:
            events.append((address, None, time, 0))
        else:
            events.append((address, chance.choice(sites), time, chance.randrange(1, 1 << 24)))
    python, loaded = both(events, 5)
    assert_same(python, loaded)
    assert python.live > 0 and python.unmatched_frees > 0


def test_a_name_that_is_not_a_str_or_an_event_that_is_not_one_is_a_type_error() -> None:
    native = NativeLedger()
    with pytest.raises(TypeError, match="a name is a str"):
        native.take([(0x200, 7, 1, 512)])
    with pytest.raises(TypeError):
        native.take([(0x200, "a.py:1", 1)])
    with pytest.raises(ValueError, match="max_points"):
        NativeLedger(max_points=0)
