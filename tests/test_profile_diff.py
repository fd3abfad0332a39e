"""GPU time differences between two profiles, and the `--fail-on-slower` rule.

A site is slower when its GPU time grew by more than the threshold and by at least the minimum
time; faster is the mirror image. Properties over generated documents state the rule's laws; the
parsers of the command-line values and the rendered text have examples.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from profile_streams import documents, hostile_documents, hostile_names, terminal_safe

from kname.census_file import printable
from kname.profiling.diff import (
    TOTAL,
    compare_gpu,
    compare_total,
    is_slower,
    parse_duration,
    parse_threshold,
    render_count_changes,
    render_gpu_diff,
    slower,
)
from kname.profiling.document import profile_document
from kname.profiling.join import KernelTotals, Profile, SiteTotals
from kname.profiling.kernel_names import display_name

thresholds = st.sampled_from([0.0, 0.05, 0.1, 0.5, 1.0])
min_times = st.sampled_from([0, 1_000, 50_000, 10**6])


def scaled(document: dict, factor: float) -> dict:
    """The same profile with every kernel's GPU time multiplied by `factor`."""
    profile = Profile(
        {
            site["name"]: _totals(site["kernels"], factor, site["order"])
            for site in document["sites"]
        },
        _totals(document["unattributed"]["kernels"], factor, 0),
    )
    return profile_document(profile)


def _totals(kernels: dict, factor: float, first: int) -> SiteTotals:
    totals = SiteTotals(first=first)
    for name, kernel in kernels.items():
        gpu_ns = round(kernel["gpu_ns"] * factor)
        totals.kernels[name] = KernelTotals(kernel["launches"], gpu_ns)
        totals.launches += kernel["launches"]
        totals.gpu_ns += gpu_ns
    return totals


@given(documents, thresholds, min_times)
def test_a_profile_compared_with_itself_has_nothing_slower_or_faster(document, threshold, floor):
    changes = compare_gpu(document, document, threshold, floor)
    assert {c.kind for c in changes} <= {"same"}
    assert compare_total(document, document, threshold, floor).kind == "same"


@given(documents, documents, thresholds, min_times)
def test_slower_one_way_is_faster_the_other_way(a, b, threshold, floor):
    forward = {c.name for c in compare_gpu(a, b, threshold, floor) if c.kind == "slower"}
    backward = {c.name for c in compare_gpu(b, a, threshold, floor) if c.kind == "faster"}
    assert forward == backward
    added = {c.name for c in compare_gpu(a, b, threshold, floor) if c.kind == "added"}
    removed = {c.name for c in compare_gpu(b, a, threshold, floor) if c.kind == "removed"}
    assert added == removed


@given(documents, documents, thresholds, min_times)
def test_a_site_is_slower_exactly_when_it_grew_past_both_limits(a, b, threshold, floor):
    old = {s["name"]: s["gpu_ns"] for s in a["sites"]}
    for change in compare_gpu(a, b, threshold, floor):
        if change.name not in old or change.kind in ("added", "removed"):
            assert change.kind in ("added", "removed")
            continue
        grown = change.after_ns - change.before_ns
        expected = grown > 0 and grown >= floor and grown > threshold * change.before_ns
        assert (change.kind == "slower") == expected


@given(documents, st.floats(1.2, 3.0), min_times)
def test_every_site_that_grew_enough_is_slower_when_all_times_grow(document, factor, floor):
    after = scaled(document, factor)
    for change in compare_gpu(document, after, 0.1, floor):
        grown = change.after_ns - change.before_ns
        assert (change.kind == "slower") == (grown >= floor and grown > 0.1 * change.before_ns)


def test_added_and_removed_sites_are_listed_but_never_slower():
    before = _document({"step app.py:10": 100_000_000})
    after = _document({"step app.py:11": 100_000_000})  # the line moved by one
    changes = compare_gpu(before, after, 0.1)
    assert [(c.kind, c.name) for c in changes] == [
        ("added", "step app.py:11"),
        ("removed", "step app.py:10"),
    ]
    assert slower(changes) == []
    assert compare_total(before, after, 0.1).kind == "same"


def test_the_total_catches_a_regression_hidden_by_renamed_sites():
    before = _document({"step app.py:10": 100_000_000})
    after = _document({"step app.py:11": 130_000_000})
    assert compare_total(before, after, 0.1).kind == "slower"


def test_the_minimum_time_keeps_tiny_kernels_from_failing():
    before = _document({"tiny app.py:1": 4_000, "big app.py:2": 10_000_000})
    after = _document({"tiny app.py:1": 8_000, "big app.py:2": 10_100_000})  # tiny: +100%
    kinds = {c.name: c.kind for c in compare_gpu(before, after, 0.1)}
    assert kinds == {"tiny app.py:1": "same", "big app.py:2": "same"}
    kinds = {c.name: c.kind for c in compare_gpu(before, after, 0.1, min_time_ns=0)}
    assert kinds == {"tiny app.py:1": "slower", "big app.py:2": "same"}


def test_is_slower_at_the_edges():
    assert not is_slower(1_000_000, 1_100_000, 0.1, 0)  # exactly +10%: not more than 10%
    assert is_slower(1_000_000, 1_100_001, 0.1, 0)
    assert not is_slower(0, 0, 0.0, 0)
    assert is_slower(0, 50_000, 0.1, 50_000)
    assert not is_slower(0, 49_999, 0.1, 50_000)


def test_the_rendered_diff_shows_the_total_and_each_change():
    before = _document({"step app.py:12": 2_000_000, "main app.py:30": 1_000_000})
    after = _document({"step app.py:12": 3_000_000, "main app.py:31": 1_000_000})
    text = render_gpu_diff(before, after, ("old.json", "new.json"), 0.1)
    lines = text.splitlines()
    assert lines[0] == (
        "kname profile diff: old.json (3.00 ms) -> new.json (4.00 ms), threshold 10% and "
        "50.0 us: 1 slower, 1 added, 1 removed"
    )
    assert lines[1].startswith(f"total slower  {TOTAL}")
    assert lines[1].split()[-10:] == [
        "3.00", "ms", "->", "4.00", "ms", "(+33.3%)", "4", "launches", "->", "4",
    ]  # fmt: skip
    assert lines[2].split()[:3] == ["slower", "step", "app.py:12"]
    assert "(+50.0%)" in lines[2]
    assert lines[3].split()[:3] == ["added", "main", "app.py:31"] and "(new)" in lines[3]
    assert lines[4].split()[:3] == ["removed", "main", "app.py:30"]
    assert "(-100.0%)" in lines[4]


def test_an_unchanged_profile_renders_one_summary_and_the_total():
    document = _document({"step app.py:12": 2_000_000})
    text = render_gpu_diff(document, copy.deepcopy(document), ("a", "b"), 0.1)
    assert text.splitlines()[0].endswith(": no site slower or faster")
    assert len(text.splitlines()) == 2


@given(hostile_documents, hostile_names, hostile_names)
def test_a_diff_of_hostile_names_reaches_the_terminal_escaped(document, old, new):
    empty = profile_document(Profile({}, SiteTotals()))
    for before, after in ((empty, document), (document, empty)):
        text = render_gpu_diff(before, after, (old, new), 0.1)
        assert terminal_safe(text)
        # The heading, the total, then one line per site added (or removed).
        assert len(text.splitlines()) == 2 + len(document["sites"])
        assert all(printable(site["name"]) in text for site in document["sites"])
        counts = render_count_changes(before, after, (old, new))
        assert counts == "" or terminal_safe(counts)
        for site in document["sites"]:
            for kernel in site["kernels"]:
                assert f"{printable(site['name'])} [{printable(display_name(kernel))}]" in counts


@pytest.mark.parametrize(
    ("text", "value"), [("10%", 0.1), ("10", 0.1), (" 2.5 % ", 0.025), ("0", 0.0), ("0%", 0.0)]
)
def test_thresholds_are_percentages(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "ten", "-5%", "nan", "inf%", "10%%"])
def test_a_bad_threshold_says_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"--fail-on-slower .*: expected a percentage"):
        parse_threshold(text)


@pytest.mark.parametrize(
    ("text", "ns"),
    [("50us", 50_000), ("50 µs", 50_000), ("2ms", 2_000_000), ("1.5s", 1_500_000_000),
     ("200ns", 200), ("0", 0), (".5ms", 500_000)],
)  # fmt: skip
def test_durations_have_units(text, ns):
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["50", "5x", "-1ms", "ms", ""])
def test_a_bad_duration_says_what_is_accepted(text):
    with pytest.raises(ValueError, match=r"--min-time .*: expected a duration such as 50us"):
        parse_duration(text)


def _document(sites: dict[str, int]) -> dict:
    profile = Profile(
        {
            name: SiteTotals(2, gpu_ns, rank, {"k": KernelTotals(2, gpu_ns)})
            for rank, (name, gpu_ns) in enumerate(sites.items(), 1)
        },
        SiteTotals(),
    )
    return profile_document(profile)
