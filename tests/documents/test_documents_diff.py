"""Two documents compared: launches per call site and kernel (censuses, `--fail-on-change`,
`--ignore-lines`), and GPU time per call site with the `--fail-on-slower` rule (profiles).

A site is slower when its GPU time grew by more than the threshold and by at least the minimum
time; faster is the mirror image. Properties over generated documents state the rules' laws; the
rendered text has examples.
"""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st
from support.profile_streams import (
    census_of,
    documents,
    hostile_documents,
    hostile_names,
    profile_of,
    site_counts,
    terminal_safe,
)

from kname.documents.build import profile_document
from kname.documents.diff import (
    TOTAL,
    Change,
    compare,
    compare_gpu,
    compare_total,
    is_slower,
    kinds_of,
    launch_counts,
    render_count_changes,
    render_gpu_diff,
    slower,
)
from kname.documents.tables import kernel_cells, name_cell
from kname.profiling.join import KernelTotals, Profile, SiteTotals

# --- launches per call site and kernel ------------------------------------------------------


@given(site_counts, site_counts)
def test_diff_deltas_add_up_to_the_change_in_total_launches(before, after) -> None:
    old, new = census_of(before), census_of(after)
    changes = compare(old, new)
    assert sum(c.after - c.before for c in changes) == new["total_launches"] - old["total_launches"]
    assert all(c.before != c.after for c in changes)
    assert {(c.name, c.kernel) for c in changes if c.kind == "added"} == set(after) - set(before)
    assert {(c.name, c.kernel) for c in changes if c.kind == "removed"} == set(before) - set(after)
    assert compare(old, old) == []


def shifted(counts: dict[tuple[str, str], int], by: int) -> dict[tuple[str, str], int]:
    """The same census after every line of every file moved down by `by`."""
    moved = {}
    for (name, kernel), launches in counts.items():
        where, line = name.rsplit(":", 1)
        key = (f"{where}:{int(line) + by}", kernel)
        moved[key] = moved.get(key, 0) + launches
    return moved


@given(site_counts, st.integers(1, 50))
def test_a_line_shift_is_no_change_when_lines_are_ignored(counts, by) -> None:
    before, after = census_of(counts), census_of(shifted(counts, by))
    assert compare(before, after, ignore_lines=True) == []
    assert (compare(before, after) == []) == (not counts)


@given(site_counts, site_counts)
def test_ignoring_lines_compares_launches_per_function_file_and_kernel(before, after) -> None:
    def per_function(counts):
        summed = {}
        for (name, kernel), launches in counts.items():
            key = (name.rsplit(":", 1)[0] + ":*", kernel)
            summed[key] = summed.get(key, 0) + launches
        return summed

    changes = compare(census_of(before), census_of(after), ignore_lines=True)
    old, new = per_function(before), per_function(after)
    assert {(c.name, c.kernel): (c.before, c.after) for c in changes} == {
        key: (old.get(key, 0), new.get(key, 0))
        for key in {*old, *new}
        if old.get(key, 0) != new.get(key, 0)
    }


def test_ignoring_lines_masks_every_line_of_a_deep_name_but_keeps_the_file() -> None:
    before = census_of({("step a.py:12 < main b.py:40", "k"): 1, ("step <cell 3>:5", "k"): 2})
    after = census_of({("step a.py:13 < main b.py:41", "k"): 1, ("step <cell 4>:5", "k"): 2})
    assert [(c.kind, c.name) for c in compare(before, after, ignore_lines=True)] == [
        ("added", "step <cell 4>:*"),
        ("removed", "step <cell 3>:*"),
    ]


@given(st.lists(st.sampled_from(["added", "removed", "changed"]), max_size=20))
def test_the_summary_counts_every_change_once_and_names_only_kinds_that_occur(kinds) -> None:
    changes = [Change(kind, f"s{i}", "k", 0, 1) for i, kind in enumerate(kinds)]
    summary = kinds_of(changes, ("added", "removed", "changed"))
    counted = {}
    for part in summary.split(", ") if summary else []:
        number, kind = part.split(" ")
        counted[kind] = int(number)
    assert counted == {kind: kinds.count(kind) for kind in set(kinds)}
    assert list(counted) == [k for k in ("added", "removed", "changed") if k in kinds]


CENSUS = census_of({("main app.py:22", "axpy"): 3, ("main app.py:23", "scale"): 1})


def test_launch_counts_read_both_schemas():
    profile = profile_document(profile_of({"main app.py:22": ("axpy", 3, 30)}))
    assert launch_counts(CENSUS) == {("main app.py:22", "axpy"): 3, ("main app.py:23", "scale"): 1}
    assert launch_counts(profile) == {("main app.py:22", "axpy"): 3}


# --- GPU time per call site -----------------------------------------------------------------

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


def test_a_site_of_graph_work_is_shown_with_the_line_that_replayed_it():
    before = _document({"forward model.py:21": 2_000_000})
    after = copy.deepcopy(before)
    after["sites"][0].update(gpu_ns=3_000_000, kernels={"k": {"launches": 2, "gpu_ns": 3_000_000}})
    after["sites"][0]["replayed_at"] = {"step runner.py:26": {"launches": 2, "gpu_ns": 3_000_000}}
    after["total_gpu_ns"] = 3_000_000
    lines = render_gpu_diff(before, after, ("a", "b"), 0.1).splitlines()
    assert lines[2].startswith(
        "slower        forward model.py:21  (graph replayed at step runner.py:26)  2.00 ms"
    )


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
        assert all(name_cell(site["name"]) in text for site in document["sites"])
        counts = render_count_changes(before, after, (old, new))
        assert counts == "" or terminal_safe(counts)
        # As a table shows a kernel: readable, cut to a name's width like any name, and told
        # apart by a digest of its name where two are cut alike (tables.kernel_cells).
        cells = kernel_cells(kernel for site in document["sites"] for kernel in site["kernels"])
        for site in document["sites"]:
            for kernel in site["kernels"]:
                assert f"{name_cell(site['name'])} [{cells[kernel]}]" in counts, (kernel, counts)


def _document(sites: dict[str, int]) -> dict:
    profile = Profile(
        {
            name: SiteTotals(2, gpu_ns, rank, {"k": KernelTotals(2, gpu_ns)})
            for rank, (name, gpu_ns) in enumerate(sites.items(), 1)
        },
        SiteTotals(),
    )
    return profile_document(profile)
