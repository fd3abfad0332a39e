"""The census document of schema 2: built from a join, validated, loaded, merged.

Merging is what `kname report a.json b.json` does with one file per rank or process: its laws
(associative, commutative, totals preserved) are hypothesis properties over generated
documents. Loading reads schema 1 (the launch census) as well.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from profile_streams import documents, streams

from kname.census_file import CensusError
from kname.census_file import render_json as render_census
from kname.profiling.document import (
    SCHEMA,
    launch_counts,
    load,
    merge_documents,
    profile_document,
    render_json,
    validate,
)
from kname.profiling.join import Join, KernelTotals, Profile, SiteTotals

CENSUS = {
    "kname": "0.1.0",
    "schema": 1,
    "sites": [
        {"name": "main app.py:22", "kernel": "axpy", "lib": "numba", "launches": 3,
         "share": 0.75, "order": 1},
        {"name": "main app.py:23", "kernel": "scale", "lib": "numba", "launches": 1,
         "share": 0.25, "order": 2},
    ],
    "total_launches": 4,
}  # fmt: skip


def canonical(document) -> dict:
    """What merging sums: per site its library, kernels and totals; the document's totals."""
    return {
        "sites": {
            s["name"]: (s["lib"], s["launches"], s["gpu_ns"], s["kernels"])
            for s in document["sites"]
        },
        "unattributed": document["unattributed"],
        "totals": (document["total_launches"], document["total_gpu_ns"], document["processes"]),
    }


@given(documents)
def test_a_document_survives_its_json_form(document):
    text = render_json(document)
    assert json.loads(text) == document
    assert validate(json.loads(text), "x.json") == document
    assert all(line.startswith(("{", "}", "  ")) for line in text.splitlines())


@given(streams())
def test_a_joined_stream_makes_a_valid_ranked_document(stream):
    join = Join()
    for launch in stream.launches:
        join.add_launch(launch)
    join.add_activities(stream.activities)
    document = validate(profile_document(join.profile()), "joined")
    times = [site["gpu_ns"] for site in document["sites"]]
    assert times == sorted(times, reverse=True)
    assert sorted(site["order"] for site in document["sites"]) == list(
        range(1, len(document["sites"]) + 1)
    )
    for site in document["sites"]:
        assert site["kernel"] == next(iter(site["kernels"]))
        top = max(site["kernels"].values(), key=lambda k: k["gpu_ns"])
        assert site["kernels"][site["kernel"]]["gpu_ns"] == top["gpu_ns"]
        share = site["gpu_ns"] / document["total_gpu_ns"] if document["total_gpu_ns"] else 0
        assert site["share"] == pytest.approx(share, abs=1e-6)


@given(documents, documents)
def test_merging_is_commutative(a, b):
    assert canonical(merge_documents([a, b])) == canonical(merge_documents([b, a]))


@given(documents, documents, documents)
def test_merging_is_associative(a, b, c):
    left = merge_documents([merge_documents([a, b]), c])
    right = merge_documents([a, merge_documents([b, c])])
    assert canonical(left) == canonical(right) == canonical(merge_documents([a, b, c]))


@given(st.lists(documents, min_size=1, max_size=4))
def test_merging_preserves_totals_and_makes_a_valid_document(parts):
    merged = validate(merge_documents(parts), "merged")
    assert merged["total_gpu_ns"] == sum(d["total_gpu_ns"] for d in parts)
    assert merged["total_launches"] == sum(d["total_launches"] for d in parts)
    assert merged["processes"] == len(parts)
    names = {s["name"] for d in parts for s in d["sites"]}
    assert {s["name"] for s in merged["sites"]} == names


@given(documents)
def test_merging_one_document_gives_it_back(document):
    assert merge_documents([document]) == document


def test_a_site_launched_through_two_libraries_keeps_no_library():
    a = profile_document(_profile_of({"step app.py:1": ("k", 1, 10)}))
    b = copy.deepcopy(a)
    a["sites"][0]["lib"], b["sites"][0]["lib"] = "numba", "cupy"
    assert merge_documents([a, a])["sites"][0]["lib"] == "numba"
    assert merge_documents([a, b])["sites"][0]["lib"] == ""


def test_launch_census_files_merge_with_their_own_kind():
    merged = merge_documents([CENSUS, CENSUS])
    assert merged["schema"] == 1 and merged["total_launches"] == 8
    assert [(s["name"], s["launches"], s["share"], s["order"]) for s in merged["sites"]] == [
        ("main app.py:22", 6, 0.75, 1),
        ("main app.py:23", 2, 0.25, 2),
    ]
    with pytest.raises(CensusError, match="cannot merge a launch census"):
        merge_documents([CENSUS, profile_document(_profile_of({}))])


def test_launch_counts_read_both_schemas():
    profile = profile_document(_profile_of({"main app.py:22": ("axpy", 3, 30)}))
    assert launch_counts(CENSUS) == {("main app.py:22", "axpy"): 3, ("main app.py:23", "scale"): 1}
    assert launch_counts(profile) == {("main app.py:22", "axpy"): 3}


def test_load_reads_either_schema(tmp_path):
    census_path = tmp_path / "census.json"
    census_path.write_text(render_census(CENSUS))
    profile_path = tmp_path / "profile.json"
    document = profile_document(_profile_of({"main app.py:22": ("axpy", 3, 30)}))
    profile_path.write_text(render_json(document))
    assert load(str(census_path))["schema"] == 1
    assert load(str(profile_path)) == document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=3), "schema 3 is not supported .* reads schemas 1 and 2"),
        (lambda d: d["sites"][0].pop("gpu_ns"), r"sites\[0\] has no 'gpu_ns'"),
        (lambda d: d["sites"][0].update(gpu_ns=-1), r"sites\[0\].gpu_ns must be a whole number"),
        (lambda d: d["sites"][0].update(share=1.5), "share must be a number from 0 to 1"),
        (lambda d: d["sites"][0].update(kernels=[]), "kernels must be an object"),
        (
            lambda d: d["sites"][0]["kernels"]["axpy"].update(gpu_ns=2),
            "not the sums of its kernels",
        ),
        (lambda d: d.update(total_gpu_ns=1), "totals .* are not the sums of the sites"),
        (lambda d: d["sites"].append(copy.deepcopy(d["sites"][0])), "is listed twice"),
        (lambda d: d.pop("unattributed"), "'unattributed' must be an object"),
        (lambda d: d.update(processes="2"), "'processes' must be a whole number"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_file_and_the_fault(tmp_path, change, message):
    document = profile_document(_profile_of({"main app.py:22": ("axpy", 3, 30)}))
    change(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CensusError, match=message) as caught:
        load(str(path))
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_files_that_are_not_documents_are_one_line(tmp_path):
    (tmp_path / "text.json").write_text("{not json")
    for name, message in [("missing.json", "no such file"), ("text.json", "not valid JSON")]:
        with pytest.raises(CensusError, match=message):
            load(str(tmp_path / name))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(CensusError, match="not a kname census"):
        load(str(tmp_path / "list.json"))
    assert SCHEMA == 2


def _profile_of(sites: dict[str, tuple[str, int, int]]) -> Profile:
    built = {}
    for rank, (name, (kernel, launches, gpu_ns)) in enumerate(sites.items(), 1):
        built[name] = SiteTotals(launches, gpu_ns, rank, {kernel: KernelTotals(launches, gpu_ns)})
    return Profile(built, SiteTotals())
