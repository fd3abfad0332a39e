"""A census of one stretch (a cell, a test body): how it is shown and asked about. Pure functions,
in-process; the snapshot difference is in test_stretch.py, and the live counting is tested in real
IPython shells (test_ipython.py) and pytest runs (test_pytest_plugin.py).
"""

from __future__ import annotations

import pytest

from kname.census_view import Census, render_html
from kname.documents.tables import NAME_WIDTH, render_census_table


def render_text(document, title="kname census"):
    return str(Census(document, title))


def site(name, kernel="axpy", lib="numba", launches=1, order=1, **extra):
    return {"name": name, "kernel": kernel, "lib": lib, "launches": launches, "share": 0.0,
            "order": order, **extra}  # fmt: skip


def document(*sites):
    total = sum(s["launches"] for s in sites)
    sites = [{**s, "share": round(s["launches"] / total, 6)} for s in sites]
    return {"kname": "0.1.0", "schema": 1, "sites": sites, "total_launches": total}


STEP = document(
    site("step solver.py:12", launches=30, order=1),
    site("step solver.py:13", kernel="scale", launches=10, order=2),
    site("main <cell 3>:2", launches=2, order=3),
    site("stepper solver.py:40", launches=5, order=4),
)


def test_the_text_table_puts_most_launches_first_under_its_heading() -> None:
    assert render_text(STEP, "kname census of cell 4") == (
        "kname census of cell 4: 47 launches from 4 call sites\n"
        "call site             kernel  library  launches  share\n"
        "step solver.py:12     axpy    numba          30  63.8%\n"
        "step solver.py:13     scale   numba          10  21.3%\n"
        "stepper solver.py:40  axpy    numba           5  10.6%\n"
        "main <cell 3>:2       axpy    numba           2   4.3%\n"
    )


def test_an_empty_census_is_its_heading_alone() -> None:
    empty = document()
    assert render_text(empty, "t") == "t: 0 launches from 0 call sites\n"
    assert "<table" not in render_html(empty, "t")


def test_a_gpu_time_column_appears_only_when_sites_carry_gpu_ns() -> None:
    timed = document(
        site("step a.py:1", launches=3, order=1, gpu_ns=12_400),
        site("main a.py:9", launches=1, order=2),
    )
    lines = render_text(timed).splitlines()
    assert lines[1].split()[-2:] == ["GPU", "time"]
    assert lines[2].endswith("12.4 us") and lines[3].endswith("-")
    assert "GPU time" in render_html(timed)
    assert "GPU time" not in render_text(STEP) + render_html(STEP)


def test_the_html_table_escapes_names_and_has_one_row_per_site() -> None:
    page = render_html(STEP, "kname census of cell 4")
    assert page.count("<tr>") == 1 + len(STEP["sites"])
    assert "main &lt;cell 3&gt;:2" in page and "<cell 3>" not in page
    assert "kname census of cell 4: 47 launches from 4 call sites" in page


@pytest.mark.parametrize(
    ("name", "kernel", "launches"),
    [
        (None, None, 47),
        ("step", None, 40),  # both step sites; not `stepper`
        ("step solver.py:12", None, 30),  # the whole name
        ("step solver.py", None, 0),  # words must be whole: `solver.py:12` is one
        ("stepper", None, 5),
        ("solver.py:12", None, 0),  # the name's first words, not any part of it
        (None, "scale", 10),
        ("step", "axpy", 30),
        ("main <cell 3>:2", None, 2),
    ],
)
def test_launches_picks_sites_by_whole_name_or_its_first_words(name, kernel, launches) -> None:
    assert Census(STEP).launches(name, kernel=kernel) == launches


def test_names_and_repr_say_what_was_counted() -> None:
    census = Census(STEP, "kname census of this test")
    assert census.names()["step solver.py:12"] == 30
    assert repr(census).startswith(
        "<kname census of this test: 47 launches from 4 call sites: step solver.py:12 [axpy] 30, "
    )
    assert str(census) == render_census_table(
        STEP, title="kname census of this test", first_seen=False
    )


def test_the_text_table_is_the_census_table_of_kname_report_without_its_first_seen_column():
    # One home for the census as text (documents/tables.py): the notebook's and pytest's table
    # is kname report's, under its own title, names escaped and cut alike.
    hostile = document(site("step \x1b[2J a.py:1", kernel="ax\x00py" + "y" * 500, launches=3))
    shown = str(Census(hostile, "kname census of cell 2")).splitlines()
    report = render_census_table(hostile, title="kname census of cell 2").splitlines()
    assert shown[0] == report[0] == "kname census of cell 2: 3 launches from 1 call site"
    assert [line.split("  first seen")[0] for line in report[1:2]] == shown[1:2]
    assert shown[2].startswith("step \\x1b[2J a.py:1  ax\\x00pyyy") and "..." in shown[2]
    assert all(line.isprintable() for line in shown)
    assert max(map(len, shown)) < NAME_WIDTH + 60
    assert "ax\x00py" + "y" * 500 in render_html(hostile)  # the HTML keeps names whole
