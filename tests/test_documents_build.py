"""Documents made by kname: from the live counts, from a join, and merged from several.

Merging is what `kname report a.json b.json` does with one file per rank or process: its laws
(associative, commutative, totals preserved) are hypothesis properties over generated
documents. Launch censuses (schema 1) merge with their own kind.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from profile_streams import census_of, documents, profile_of, site_counts, streams

from kname.documents.build import census_document, merge_documents, profile_document
from kname.documents.schema import DocumentError, validate
from kname.profiling.join import Join

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


@given(site_counts)
def test_a_census_of_counted_rows_is_the_valid_census_of_those_rows(counts) -> None:
    rows = {(name, kernel, "numba"): launches for (name, kernel), launches in counts.items()}
    document = validate(census_document(rows), "counted")
    assert {k: v for k, v in document.items() if k != "kname"} == {
        k: v for k, v in census_of(counts).items() if k != "kname"
    }


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


@given(st.lists(documents, min_size=1, max_size=4))
def test_merging_sums_each_sites_graph_work_by_replay_line(parts):
    merged = {s["name"]: s for s in merge_documents(parts)["sites"]}
    for name, site in merged.items():
        mine = [s for d in parts for s in d["sites"] if s["name"] == name]
        replays = {r for s in mine for r in s.get("replayed_at", {})}
        assert set(site.get("replayed_at", {})) == replays
        for replay in replays:
            counts = [s["replayed_at"][replay] for s in mine if replay in s.get("replayed_at", {})]
            assert site["replayed_at"][replay] == {
                "launches": sum(c["launches"] for c in counts),
                "gpu_ns": sum(c["gpu_ns"] for c in counts),
            }
        unseen = sum(s.get("replayed_unseen", {}).get("launches", 0) for s in mine)
        assert site.get("replayed_unseen", {}).get("launches", 0) == unseen


@given(documents)
def test_merging_one_document_gives_it_back(document):
    assert merge_documents([document]) == document


def test_a_site_launched_through_two_libraries_keeps_no_library():
    a = profile_document(profile_of({"step app.py:1": ("k", 1, 10)}))
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
    with pytest.raises(DocumentError, match="cannot merge a launch census"):
        merge_documents([CENSUS, profile_document(profile_of({}))])
