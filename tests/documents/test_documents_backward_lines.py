"""Backward per forward line in documents (kname.documents.backward_lines): the names a backward
launch is recorded under, folded back into the pass's row and the forward lines' fields; the
fields through JSON, validate, merge, the table, the diff and the page."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.profile_streams import PROFILE_KERNELS, _replayed, _totals

from kname.documents import backward_lines
from kname.documents.backward_lines import (
    BACKWARD_LAUNCHES,
    BACKWARD_LINES_NS,
    BACKWARD_NS,
    BACKWARD_UNKNOWN_NS,
    UNKNOWN,
    backward_site,
    pass_unless_forward_known,
    split_backward_site,
)
from kname.documents.build import profile_document
from kname.documents.diff import render_gpu_diff
from kname.documents.merge import merge_documents
from kname.documents.pages.profile import render_profile_page
from kname.documents.schema import (
    REPLAYED_AT,
    REPLAYED_UNSEEN,
    DocumentError,
    render_json,
    validate,
)
from kname.documents.tables import render_profile_table
from kname.profiling.join import Profile, SiteTotals

PASSES = ("train app.py:40", "train app.py:41 [concurrent backward]")
FORWARD = ("forward model.py:21", "attention model.py:30", "mlp model.py:35", UNKNOWN)
PLAIN = ("train app.py:40", "forward model.py:21", "main app.py:9")
line_names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


@st.composite
def backward_profiles(draw) -> Profile:
    """A join's result where some sites are backward launches' names (pass, forward line)."""
    names = draw(st.lists(st.sampled_from(PLAIN), max_size=3, unique=True))
    pairs = st.tuples(st.sampled_from(PASSES), st.sampled_from(FORWARD))
    names += [backward_site(*pair) for pair in draw(st.lists(pairs, max_size=6, unique=True))]
    sites = {}
    for first, name in enumerate(names, 1):
        sites[name] = _totals(draw, first, PROFILE_KERNELS)
        if draw(st.booleans()):
            _replayed(draw, sites[name], st.sampled_from(PLAIN))
    return Profile(sites, SiteTotals())


@given(line_names.filter(bool), line_names.filter(bool))
def test_a_backward_launchs_name_splits_back_into_its_pass_and_its_forward_line(pass_, forward):
    if backward_lines.BACKWARD_OF in pass_:
        return  # a pass's line is a call site's name: never this marker
    assert split_backward_site(backward_site(pass_, forward)) == (pass_, forward)


@given(st.sampled_from((*PLAIN, "a [b]", "x [backward of ", "[backward of y]")))
def test_a_call_sites_own_name_is_never_taken_for_a_backward_launchs(name):
    assert split_backward_site(name) is None


@given(line_names.filter(bool), line_names.filter(bool))
def test_memory_charges_a_backward_block_to_its_pass_unless_its_forward_line_is_known(
    pass_, forward
):
    if backward_lines.BACKWARD_OF in pass_:
        return  # a pass's line is a call site's name: never this marker
    assert pass_unless_forward_known(backward_site(pass_, UNKNOWN)) == pass_
    named = backward_site(pass_, forward)
    assert pass_unless_forward_known(named) == (pass_ if forward == UNKNOWN else named)
    assert pass_unless_forward_known(pass_) == pass_  # a call site's own name, as it is


@given(backward_profiles())
def test_folding_keeps_every_launch_and_gives_the_forward_lines_what_the_passes_charged(profile):
    document = validate(profile_document(profile), "live")
    sites = {site["name"]: site for site in document["sites"]}
    assert not any(split_backward_site(name) for name in sites)
    recorded = sum(totals.gpu_ns for totals in profile.sites.values())
    assert sum(site["gpu_ns"] for site in sites.values()) == recorded == document["total_gpu_ns"]
    replayed = sum(c.launches for t in profile.sites.values() for c in t.replays.values())
    replayed += sum(t.unseen.launches for t in profile.sites.values())
    kept = sum(c["launches"] for s in sites.values() for c in s.get(REPLAYED_AT, {}).values())
    kept += sum(s.get(REPLAYED_UNSEEN, {}).get("launches", 0) for s in sites.values())
    assert kept == replayed  # a compiled backward's graph work stays, in its pass's row
    for pass_ in PASSES:
        mine = {f: t for (p, f), t in _backward(profile).items() if p == pass_}
        if not mine:
            continue
        known = sum(t.gpu_ns for f, t in mine.items() if f != UNKNOWN)
        assert sites[pass_].get(BACKWARD_LINES_NS, 0) == known
        assert sites[pass_].get(BACKWARD_UNKNOWN_NS, 0) == sum(
            t.gpu_ns for f, t in mine.items() if f == UNKNOWN
        )
    for forward in FORWARD[:-1]:
        given_ = [t for (_, f), t in _backward(profile).items() if f == forward]
        if given_:
            assert sites[forward].get(BACKWARD_NS, 0) == sum(t.gpu_ns for t in given_)
            assert sites[forward][BACKWARD_LAUNCHES] == sum(t.launches for t in given_)
    assert UNKNOWN not in sites


def _backward(profile: Profile) -> dict[tuple[str, str], SiteTotals]:
    return {
        parts: totals
        for name, totals in profile.sites.items()
        if (parts := split_backward_site(name)) is not None
    }


@given(backward_profiles())
def test_the_fields_come_back_the_same_through_json_validate_and_a_merge_sums_them(profile):
    document = profile_document(profile)
    again = validate(json.loads(render_json(document)), "again.json")
    assert again == json.loads(json.dumps(document))
    merged = merge_documents([again, again])
    for site in merged["sites"]:
        one = next(s for s in again["sites"] if s["name"] == site["name"])
        for field in backward_lines.FIELDS:
            assert site.get(field, 0) == 2 * one.get(field, 0)
    validate(merged, "merged")


def _document_with(**fields) -> dict:
    sites = {"train app.py:40": _fixed(3, 300), "forward model.py:21": _fixed(1, 50)}
    profile = Profile(sites, SiteTotals())
    document = profile_document(profile)
    pass_row, forward_row = sorted(document["sites"], key=lambda s: s["name"], reverse=True)
    pass_row[BACKWARD_LINES_NS] = 200
    forward_row[BACKWARD_NS] = 200
    forward_row[BACKWARD_LAUNCHES] = 2
    for field, (row, value) in fields.items():
        (pass_row if row == "pass" else forward_row)[field] = value
    return document


def _fixed(launches: int, gpu_ns: int) -> SiteTotals:
    from kname.profiling.join import KernelTotals

    return SiteTotals(launches, gpu_ns, 1, {"k": KernelTotals(launches, gpu_ns)})


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({BACKWARD_NS: ("forward", -1)}, "backward_ns must be a count"),
        ({BACKWARD_NS: ("forward", 1.5)}, "backward_ns must be a count"),
        ({BACKWARD_LAUNCHES: ("forward", True)}, "backward_launches must be a count"),
        ({BACKWARD_NS: ("forward", 2**63)}, "backward_ns must be a count"),
        ({BACKWARD_UNKNOWN_NS: ("pass", 101)}, "add up to more than its gpu_ns"),
        ({BACKWARD_NS: ("forward", 199)}, "not the backward_lines_ns of the passes"),
    ],
)
def test_a_file_with_backward_fields_out_of_bounds_is_refused_in_one_line(fields, said):
    validate(_document_with(), "good.json")
    with pytest.raises(DocumentError, match=said) as refused:
        validate(_document_with(**fields), "bad.json")
    assert str(refused.value).startswith("bad.json: ") and "\n" not in str(refused.value)


def test_the_table_has_a_backward_column_and_says_what_has_no_known_line():
    document = _document_with(**{BACKWARD_UNKNOWN_NS: ("pass", 40)})
    table = render_profile_table(document).splitlines()
    header = table[1].split()
    assert header[:5] == ["call", "site", "GPU", "time", "backward"]
    rows = {line.split()[0] + " " + line.split()[1]: line.split() for line in table[2:4]}
    assert rows["forward model.py:21"][4] == "200"  # 200 ns, in its own column
    assert rows["train app.py:40"][4] == backward_lines.PASS_CELL
    assert "40 ns of the backward pass at train app.py:40 ran nodes with no known" in table[-1]


def test_a_table_without_backward_fields_is_as_before():
    profile = Profile({"step app.py:3": _fixed(1, 10)}, SiteTotals())
    assert "backward" not in render_profile_table(profile_document(profile))


def test_the_diff_notes_a_forward_lines_backward_time_before_and_after():
    before, after = _document_with(), _document_with()
    for document, value in ((before, 200), (after, 150)):
        forward = next(s for s in document["sites"] if s["name"] == "forward model.py:21")
        pass_ = next(s for s in document["sites"] if s["name"] == "train app.py:40")
        forward[BACKWARD_NS] = pass_[BACKWARD_LINES_NS] = value
    forward = next(s for s in after["sites"] if s["name"] == "forward model.py:21")
    forward["gpu_ns"] = forward["kernels"]["k"]["gpu_ns"] = 10**6  # shown: it got slower
    text = render_gpu_diff(before, after, ("a", "b"), 0.1, 0)
    line = next(line for line in text.splitlines() if "forward model.py:21" in line)
    assert "(backward 200 ns -> 150 ns)" in line


def test_the_page_shows_each_lines_backward_time_beside_its_gpu_time():
    page = render_profile_page(_document_with())
    assert "backward 200 ns" in page  # the ranking, under the forward line's name
