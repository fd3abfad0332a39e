"""Text for a terminal: durations (one format for every table, diff and page), counted nouns,
and names made safe to print."""

from __future__ import annotations

import os

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.profile_streams import hostile_names

from kname.documents.text import count_of, format_duration, os_text, printable


@pytest.mark.parametrize(
    ("ns", "text"),
    [(0, "0 ns"), (812, "812 ns"), (1_000, "1.00 us"), (12_345, "12.3 us"), (405_000, "405 us"),
     (4_560_000, "4.56 ms"), (1_234_000_000, "1.23 s"), (999.6, "1.00 us"), (999_600, "1.00 ms"),
     (999.4, "999 ns"), (2_500.5, "2.50 us")],
)  # fmt: skip
def test_durations_have_three_significant_digits(ns, text):
    assert format_duration(ns) == text


@pytest.mark.parametrize(
    ("nanoseconds", "shown"),
    [(0, "0 ns"), (812, "812 ns"), (12_400, "12.4 us"), (3_100_000, "3.10 ms"),
     (250_000_000, "250 ms"), (2_500_000_000, "2.50 s")],
)  # fmt: skip
def test_gpu_times_are_shown_in_the_largest_unit_that_fits(nanoseconds, shown) -> None:
    assert format_duration(nanoseconds) == shown


@given(st.floats(0, 999e9))  # past 999 s, seconds have no larger unit to go to
@example(99_950_000_000.0)  # 99.95 s rounds up to 100 s, not "100.0 s"
@example(9_995_000.0)
def test_a_duration_never_shows_four_digits_before_its_unit(ns):
    number = format_duration(ns).split()[0]
    assert len(number.replace(".", "").lstrip("0")) <= 3, number


def test_nouns_count():
    assert [count_of(n, "launch") for n in (0, 1, 2)] == ["0 launches", "1 launch", "2 launches"]
    assert count_of(3, "call site") == "3 call sites"
    assert count_of(2, "process") == "2 processes"


@given(st.one_of(hostile_names, st.text()))
def test_printable_text_is_kept_and_any_other_is_escaped_to_one_printable_line(text):
    shown = printable(text)
    assert shown.isprintable()
    assert (shown == text) == text.isprintable()


# Text as the system hands it over: any bytes, decoded as os.fsdecode does (surrogateescape).
system_text = st.one_of(
    st.binary(max_size=40).map(os.fsdecode),
    st.text(max_size=40),  # lone surrogates of every kind among them
)


@given(system_text)
def test_os_text_is_always_utf_8_and_leaves_what_already_was_as_it_was(text) -> None:
    made = os_text(text)
    made.encode("utf-8")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert made != text
    else:
        assert made == text


@given(st.binary(max_size=40))
def test_an_undecodable_byte_is_shown_as_its_escape(data) -> None:
    assert os_text(os.fsdecode(data)) == data.decode("utf-8", "backslashreplace")
