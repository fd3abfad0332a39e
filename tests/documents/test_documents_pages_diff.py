"""The diff page (kname.documents.pages.diff): each site and each line judged by the rule of the
text diff (`kname report --diff`), shown before and after, linked to its line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.html_pages import ATTRIBUTES, TAGS, ParsedPage, chains, name_of, per_line, sourced
from support.recorded_pages import h200_halves

from kname.documents.build import census_document, profile_document
from kname.documents.diff import Comparison, compare_gpu, is_slower
from kname.documents.pages.diff import render_diff_page
from kname.documents.text import format_duration, printable
from kname.profiling.join import KernelTotals, Profile, SiteTotals

KIND = {"slower": "up", "faster": "down", "added": "new", "removed": "gone", "same": "same"}
THRESHOLD, MIN_TIME = 0.10, 1_000


def page_of(before: dict, after: dict, labels: tuple[str, str]) -> str:
    """The page of two profiles compared with THRESHOLD and MIN_TIME."""
    return render_diff_page(Comparison(before, after, labels, False, THRESHOLD, MIN_TIME))


def profile_of(times: dict[str, int]) -> dict:
    sites = {
        name: SiteTotals(2, gpu_ns, rank, {"k": KernelTotals(2, gpu_ns)})
        for rank, (name, gpu_ns) in enumerate(times.items(), 1)
    }
    return profile_document(Profile(sites, SiteTotals()))


@st.composite
def two_profiles(draw) -> tuple[dict, dict, dict[str, list]]:
    """(before, after, {name: chain}): sites in either or both, their GPU time changed or not."""
    made = {name_of(c): c for c in draw(st.lists(chains, min_size=1, max_size=8))}
    times = st.integers(0, 10**6)
    before, after = {}, {}
    for name in made:
        where = draw(st.sampled_from(["both", "before", "after"]))
        if where != "after":
            before[name] = draw(times)
        if where != "before":
            after[name] = draw(st.one_of(times, st.just(before.get(name, 0))))
    return (
        draw(sourced(profile_of(before))),
        draw(sourced(profile_of(after))),
        made,
    )


@settings(deadline=None)
@given(two_profiles())
def test_each_site_is_judged_as_the_text_diff_judges_it_and_links_to_its_line(pair):
    before, after, made = pair
    page = ParsedPage(page_of(before, after, ("a.json", "b.json")))
    judged = {c.name: KIND[c.kind] for c in compare_gpu(before, after, THRESHOLD, MIN_TIME)}
    rows = page.sites("changes")
    assert {row.attributes["data-site"]: row.attributes["data-change"] for row in rows} == judged
    views = page.view_of_file()
    for row in rows:
        _, path, line = made[row.attributes["data-site"]][0]
        assert row.links == [f"#{views[printable(path)]}-L{line}"]


@settings(deadline=None)
@given(two_profiles())
def test_each_line_shows_its_time_before_and_after_and_whether_it_is_slower_faster_new_or_gone(
    pair,
):
    before, after, made = pair
    page = ParsedPage(page_of(before, after, ("a.json", "b.json")))
    old, new = per_line(before, made, "gpu_ns"), per_line(after, made, "gpu_ns")
    views = page.view_of_file()
    for path, line in old.keys() | new.keys():
        row = page.lines(views[printable(path)])[line]
        _, was, now, change, _code = row.cells
        assert was[1] == (format_duration(old[path, line]) if (path, line) in old else "-")
        assert now[1] == (format_duration(new[path, line]) if (path, line) in new else "-")
        if (path, line) not in old:
            kind = "new"
        elif (path, line) not in new:
            kind = "gone"
        elif is_slower(old[path, line], new[path, line], THRESHOLD, MIN_TIME):
            kind = "up"
        elif is_slower(new[path, line], old[path, line], THRESHOLD, MIN_TIME):
            kind = "down"
        else:
            kind = "same"
        assert kind in change[0].split()


def test_the_summary_counts_each_kind_in_the_words_of_a_profile():
    before = profile_of({"a app.py:1": 100_000, "b app.py:2": 100_000, "c app.py:3": 5_000})
    after = profile_of({"a app.py:1": 200_000, "b app.py:2": 50_000, "d app.py:4": 7_000})
    page = page_of(before, after, ("old.json", "new.json"))
    assert (
        "old.json (205 us) -&gt; new.json (257 us): 1 slower, 1 faster, 1 added, 1 removed "
        "(threshold 10% and 1.00 us)"
    ) in page


def test_a_census_diff_counts_launches_changed_added_and_removed_as_the_text_does():
    before = census_document({("a app.py:1", "k", ""): 3, ("b app.py:2", "k", ""): 5,
                              ("c app.py:3", "k", ""): 1, ("e app.py:5", "k", ""): 2})  # fmt: skip
    after = census_document({("a app.py:1", "k", ""): 4, ("b app.py:2", "k", ""): 2,
                             ("d app.py:4", "k", ""): 1, ("e app.py:5", "k", ""): 2})  # fmt: skip
    page = render_diff_page(Comparison(before, after, ("old.json", "new.json")))
    rows = ParsedPage(page).sites("changes")
    assert {row.attributes["data-site"]: row.cells[0][1] for row in rows} == {
        "a app.py:1": "changed",
        "b app.py:2": "changed",
        "c app.py:3": "removed",
        "d app.py:4": "added",
        "e app.py:5": "same",
    }
    assert {row.attributes["data-site"]: row.attributes["data-change"] for row in rows} == {
        "a app.py:1": "up",
        "b app.py:2": "down",
        "c app.py:3": "gone",
        "d app.py:4": "new",
        "e app.py:5": "same",
    }
    assert "1 added, 1 removed, 2 changed" in page


@settings(deadline=None, max_examples=50)
@given(two_profiles(), st.text(), st.text())
def test_labels_and_names_never_leave_their_escaping(pair, old_label, new_label):
    before, after, _ = pair
    page = render_diff_page(Comparison(before, after, (old_label, new_label)))
    page.encode("utf-8")
    parsed = ParsedPage(page)
    assert set(parsed.tags) <= TAGS and {name for name, _ in parsed.attributes} <= ATTRIBUTES
    assert not [chunk for chunk in parsed.raw_text if "<" in chunk or ">" in chunk]
    assert {href[1:] for href in parsed.hrefs} <= set(parsed.ids)


def test_the_halves_of_the_recorded_h200_profile_compare_line_by_line():
    first, second = h200_halves()
    page = ParsedPage(page_of(first, second, ("first.json", "second.json")))
    names = {site["name"] for site in first["sites"]} | {site["name"] for site in second["sites"]}
    rows = page.sites("changes")
    assert {row.attributes["data-site"] for row in rows} == names
    assert all(row.links and row.links[0].startswith("#f1-L") for row in rows)
    assert {row.attributes["data-change"] for row in rows} <= {"up", "down", "same", "gone", "new"}
