"""kname.profiling.memory: live bytes per line, checked against a model that recomputes
everything from the whole sequence of events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kname.profiling.memory import Ledger, Timeline

SITES = st.sampled_from(["alloc a.py:1", "alloc a.py:2", "load b.py:7", "<unattributed>"])
SIZES = st.integers(min_value=0, max_value=1 << 34)

# An event: ("alloc", site, slot, size) or ("free", slot); slots stand for addresses, so that
# frees hit live blocks, freed ones and never-allocated ones alike.
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), SITES, st.integers(0, 7), SIZES),
        st.tuples(st.just("free"), st.integers(0, 9)),
    ),
    max_size=60,
)


def replay(events: list[tuple]) -> tuple[Ledger, list[dict[int, tuple[str, int]]]]:
    """The ledger after `events`, and the model's live blocks after each event."""
    ledger = Ledger()
    blocks: dict[int, tuple[str, int]] = {}
    states = []
    for time, event in enumerate(events):
        if event[0] == "alloc":
            _, site, slot, size = event
            ledger.allocate(site, 0x1000 * (slot + 1), size, time)
            blocks[slot] = (site, size)  # an address allocated again replaces its block
        else:
            ledger.free(0x1000 * (event[1] + 1), time)
            blocks.pop(event[1], None)
        states.append(dict(blocks))
    return ledger, states


def held(blocks: dict[int, tuple[str, int]], site: str | None = None) -> int:
    return sum(size for s, size in blocks.values() if site is None or s == site)


@given(EVENTS)
def test_live_bytes_are_the_blocks_allocated_and_not_freed(events) -> None:
    ledger, states = replay(events)
    final = states[-1] if states else {}
    assert ledger.live == held(final)
    for site, memory in ledger.sites.items():
        assert memory.live == held(final, site)
        assert memory.allocated - memory.freed == memory.live


@given(EVENTS)
def test_the_peak_is_the_first_highest_total_and_each_line_holds_there_what_the_model_says(
    events,
) -> None:
    ledger, states = replay(events)
    totals = [held(state) for state in states]
    peak = max(totals, default=0)
    assert ledger.peak == peak
    if peak:
        first = totals.index(peak)
        assert ledger.peak_time == first
        for site in ledger.sites:
            assert ledger.at_peak(site) == held(states[first], site)
    assert sum(ledger.at_peak(site) for site in ledger.sites) == peak


@given(EVENTS)
def test_a_lines_own_peak_is_the_most_it_held_at_once_and_bounds_what_it_held_at_the_peak(
    events,
) -> None:
    ledger, states = replay(events)
    for site, memory in ledger.sites.items():
        assert memory.peak == max(held(state, site) for state in states)
        assert ledger.at_peak(site) <= memory.peak <= memory.allocated


@given(EVENTS)
def test_frees_are_counted_once_and_frees_of_unknown_addresses_apart(events) -> None:
    ledger, _ = replay(events)
    live: set[int] = set()
    unmatched = 0
    for event in events:
        if event[0] == "alloc":
            live.add(event[2])
        elif event[1] in live:
            live.discard(event[1])
        else:
            unmatched += 1
    assert ledger.unmatched_frees == unmatched
    allocations = sum(m.allocations for m in ledger.sites.values())
    frees = sum(m.frees for m in ledger.sites.values())
    assert allocations - frees == len(live)


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 10**12), SIZES), min_size=1, max_size=300))
def test_a_timeline_stays_bounded_and_keeps_its_highest_point(points) -> None:
    timeline = Timeline(max_points=16)
    for time, live in points:
        timeline.add(time, live)
    assert len(timeline.points) <= 16
    assert max(b for _, b in timeline.points) == max(b for _, b in points)
    assert timeline.points[-1][0] == points[-1][0]


def test_past_the_bound_of_followed_blocks_allocations_are_counted_apart() -> None:
    ledger = Ledger(max_blocks=2)
    for address in (1, 2, 3):
        ledger.allocate("a.py:1", address, 10, address)
    assert ledger.untracked == 1
    assert ledger.live == 20
    assert ledger.free(3, 4) is False


def test_the_peak_line_is_the_one_holding_most_at_the_peak_not_the_one_that_allocated_most():
    ledger = Ledger()
    ledger.allocate("churn a.py:1", 1, 100, 0)
    ledger.free(1, 1)
    ledger.allocate("churn a.py:1", 1, 100, 2)
    ledger.free(1, 3)
    ledger.allocate("hold a.py:2", 2, 60, 4)
    ledger.allocate("small a.py:3", 3, 50, 5)
    assert ledger.peak == 110
    assert ledger.peak_site() == "hold a.py:2"
    assert ledger.site_dicts()["churn a.py:1"] == {
        "allocated": 200, "allocations": 2, "freed": 200, "frees": 2, "peak": 100, "at_peak": 0,
    }  # fmt: skip


@given(EVENTS, st.integers(1, 6), st.integers(1, 9))
def test_events_taken_in_one_loop_leave_the_ledger_as_one_call_each_does(
    events, max_points: int, max_blocks: int
) -> None:
    """Ledger.take (the GPU trace's settle, and the C ledger's reference) against allocate()
    and free() one by one, with bounds small enough that the timeline halves and allocations
    go untracked."""
    one_by_one = Ledger(max_points, max_blocks)
    taken = []
    for time, event in enumerate(events):
        if event[0] == "alloc":
            _, site, slot, size = event
            one_by_one.allocate(site, 0x1000 * (slot + 1), size, time)
            taken.append((0x1000 * (slot + 1), site, time, size))
        else:
            one_by_one.free(0x1000 * (event[1] + 1), time)
            taken.append((0x1000 * (event[1] + 1), None, time, 0))
    at_once = Ledger(max_points, max_blocks)
    half = len(taken) // 2
    at_once.take(taken[:half])  # in two batches, as settles come
    at_once.take(taken[half:])
    assert at_once.site_dicts() == one_by_one.site_dicts()
    assert at_once.view_dict() == one_by_one.view_dict()
    assert at_once.peak_site() == one_by_one.peak_site()
    assert blocks_held(at_once) == blocks_held(one_by_one)


def blocks_held(ledger: Ledger) -> dict[int, tuple[str, int]]:
    """{address: (the line holding it, its bytes)} of the blocks a ledger still follows."""
    names = {id(memory): site for site, memory in ledger.sites.items()}
    return {
        address: (names[id(memory)], size) for address, (memory, size) in ledger._blocks.items()
    }
