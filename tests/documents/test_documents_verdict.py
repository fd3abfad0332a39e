"""The launch-bound verdict (documents/verdict.py) and its field in the profile (launch_times):
its arithmetic, its JSON form and bounds, its merge, its column and advice in the table, and its
note on the page."""

from __future__ import annotations

import copy
import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.profile_streams import documents, profile_of

from kname.documents.build import profile_document
from kname.documents.diff import Comparison
from kname.documents.merge import merge_documents as merge
from kname.documents.pages.profile import render_profile_page
from kname.documents.schema import DocumentError, render_json, validate
from kname.documents.tables import ADVICE_SHOWN, VERDICT_HEADER, render_profile_table
from kname.documents.verdict import (
    LAUNCH_BOUND,
    LAUNCH_TIMES,
    MIN_CALLS,
    advice,
    launch_bound,
    site_verdict,
)

counts = st.integers(0, 10**6)
times = st.integers(0, 10**12)


@given(calls=counts, cpu_ns=times, launches=counts, gpu_ns=times)
def test_a_line_of_calls_is_launch_bound_exactly_when_its_cpu_per_call_is_above_its_gpu_per_record(
    calls, cpu_ns, launches, gpu_ns
) -> None:
    expected = (
        calls >= MIN_CALLS and launches > 0 and Fraction(cpu_ns, calls) > Fraction(gpu_ns, launches)
    )
    assert launch_bound(calls, cpu_ns, launches, gpu_ns) == expected


@given(
    calls=st.integers(MIN_CALLS, 10**6),
    cpu_ns=times,
    launches=st.integers(1, 10**6),
    gpu_ns=times,
    scale=st.integers(1, 1000),
)
def test_the_verdict_is_the_same_for_a_run_repeated_any_number_of_times(
    calls, cpu_ns, launches, gpu_ns, scale
) -> None:
    once = launch_bound(calls, cpu_ns, launches, gpu_ns)
    assert launch_bound(calls * scale, cpu_ns * scale, launches * scale, gpu_ns * scale) == once


@given(
    calls=st.integers(MIN_CALLS, 10**6), cpu_ns=times, launches=st.integers(1, 10**6), gpu_ns=times
)
def test_more_cpu_time_never_turns_a_launch_bound_line_into_one_that_is_not(
    calls, cpu_ns, launches, gpu_ns
) -> None:
    if launch_bound(calls, cpu_ns, launches, gpu_ns):
        assert launch_bound(calls, cpu_ns + 1, launches, gpu_ns)
        assert not gpu_ns or launch_bound(calls, cpu_ns, launches, gpu_ns - 1)


@given(calls=counts, cpu_ns=times, launches=counts, gpu_ns=times, kernels=st.integers(0, 5))
def test_advice_is_given_to_launch_bound_lines_and_only_to_them(
    calls, cpu_ns, launches, gpu_ns, kernels
) -> None:
    said = advice(calls, cpu_ns, launches, gpu_ns, kernels)
    assert bool(said) == launch_bound(calls, cpu_ns, launches, gpu_ns)
    if said:
        assert ("fuse" in said) == (kernels > 1)
        assert ("batch" in said) == (kernels <= 1)


def timed(name: str, launches: int, gpu_ns: int, calls: int, cpu_ns: int, idle_ns: int) -> dict:
    """A profile of one site whose launches were timed."""
    document = profile_document(profile_of({name: ("k", launches, gpu_ns)}))
    document["sites"][0][LAUNCH_TIMES] = {"calls": calls, "cpu_ns": cpu_ns, "idle_ns": idle_ns}
    return validate(document, "timed.json")


@given(documents)
def test_launch_times_survive_the_json_form(document) -> None:
    assert validate(json.loads(render_json(document)), "x.json") == document


@given(documents, documents)
def test_a_merge_sums_each_lines_launch_times(first, second) -> None:
    merged = {site["name"]: site for site in merge([first, second])["sites"]}
    for name, site in merged.items():
        calls = [
            s.get(LAUNCH_TIMES) for d in (first, second) for s in d["sites"] if s["name"] == name
        ]
        calls = [times for times in calls if times]
        summed = {k: sum(times[k] for times in calls) for k in ("calls", "cpu_ns", "idle_ns")}
        assert site.get(LAUNCH_TIMES) == (summed if summed["calls"] else None)


def test_a_profile_written_before_launch_times_reads_as_lines_without_a_verdict() -> None:
    document = profile_document(profile_of({"step app.py:3": ("k", 3, 30)}))
    assert LAUNCH_TIMES not in document["sites"][0]
    table = render_profile_table(validate(document, "old.json"))
    assert all(header not in table for header in VERDICT_HEADER)
    assert site_verdict(document["sites"][0]) == ""


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ([1, 2, 3], "sites[0].launch_times: must be {'calls': n"),
        ({"calls": 1, "cpu_ns": -1, "idle_ns": 0}, "sites[0].launch_times: must be"),
        ({"calls": 1, "cpu_ns": 2**63, "idle_ns": 0}, "sites[0].launch_times: must be"),
        ({"calls": 1, "cpu_ns": 1}, "sites[0].launch_times: must be"),
        ({"calls": 4, "cpu_ns": 1, "idle_ns": 0}, "more timed launch calls than the site's"),
    ],
)
def test_bad_launch_times_are_one_line_naming_the_file_and_the_field(times, message) -> None:
    document = copy.deepcopy(timed("step app.py:3", 3, 30, 1, 10, 0))
    document["sites"][0][LAUNCH_TIMES] = times
    with pytest.raises(DocumentError) as raised:
        validate(document, "bad.json")
    assert str(raised.value).startswith("bad.json: ") and message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_table_marks_a_launch_bound_line_and_advises_it_in_one_line() -> None:
    tiny = timed("main demo.py:30", 200, 300_000, 200, 800_000, 600_000)
    big = timed("main demo.py:32", 4, 12_000_000, 4, 24_000, 0)
    table = render_profile_table(merge([tiny, big]))
    rows = {
        line.split()[1]: line
        for line in table.splitlines()
        if line.startswith("main ") and " is launch-bound: " not in line
    }
    assert "launch-bound" in rows["demo.py:30"] and "4.00 us" in rows["demo.py:30"]
    assert "launch-bound" not in rows["demo.py:32"]
    advice_lines = [line for line in table.splitlines() if " is launch-bound: " in line]
    assert advice_lines == [
        "main demo.py:30 is launch-bound: one kernel launched 200 times: batch them into fewer,"
        " larger launches, or capture the loop in a CUDA graph"
    ]


def test_advice_is_given_for_at_most_a_few_lines_and_the_rest_counted() -> None:
    sites = [timed(f"f app.py:{n}", 2, 20, 2, 100, 0) for n in range(ADVICE_SHOWN + 3)]
    table = render_profile_table(merge(sites))
    assert table.count(" is launch-bound: ") == ADVICE_SHOWN
    assert "... and 3 more" in table


def test_the_page_says_the_verdict_beneath_each_timed_line() -> None:
    page = render_profile_page(
        merge(
            [
                timed("main demo.py:30", 200, 300_000, 200, 800_000, 600_000),
                timed("main demo.py:32", 4, 12_000_000, 4, 24_000, 0),
            ]
        )
    )
    assert page.count(f'<div class="verdict" data-verdict="{LAUNCH_BOUND}"') == 1
    assert page.count('<div class="verdict" data-verdict=""') == 1
    assert 'data-launch-cpu-ns="800000" data-launch-calls="200" data-idle-ns="600000"' in page


def test_a_diff_says_which_lines_became_launch_bound_and_which_no_longer_are() -> None:
    before = merge(
        [
            timed("main demo.py:30", 200, 300_000, 200, 200_000, 0),
            timed("main demo.py:32", 4, 12_000, 4, 24_000, 0),
        ]
    )
    after = merge(
        [
            timed("main demo.py:30", 200, 300_000, 200, 800_000, 0),
            timed("main demo.py:32", 4, 12_000_000, 4, 24_000, 0),
        ]
    )
    text = Comparison(before, after, ("a.json", "b.json")).text()
    assert "main demo.py:32  (no longer launch-bound)" in text
    assert "main demo.py:30" not in text  # the same GPU time: not listed, however judged
    untimed = profile_document(profile_of({"main demo.py:32": ("k", 4, 12_000)}))
    assert "launch-bound" not in Comparison(untimed, after, ("a.json", "b.json")).text()


def test_a_line_launched_once_is_not_judged_its_call_may_have_loaded_the_module() -> None:
    once = timed("main demo.py:24", 1, 41_300, 1, 622_000, 614_000)
    assert site_verdict(once["sites"][0]) == ""
    assert "launch-bound" not in render_profile_table(once)
