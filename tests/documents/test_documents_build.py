"""Documents made by kname: from the live counts and from a join, with who made them.

Merges of several documents are test_documents_merge.py.
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from support.profile_streams import census_of, profile_of, site_counts, streams

from kname.documents.build import census_document, profile_document
from kname.documents.schema import RANKS, render_json, validate
from kname.profiling.join import Join
from kname.ranks import Rank, meta


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


def test_a_document_says_who_made_it_when_told() -> None:
    record = meta(Rank(3, 1, 8, "slurm"), host="node2", pid=77, device="1")
    census = validate(census_document({("step app.py:1", "axpy", "numba"): 2}, record), "c")
    profile = validate(profile_document(profile_of({"step app.py:1": ("k", 1, 9)}), 1, record), "p")
    for document in (census, profile):
        assert document[RANKS] == [record]
    assert RANKS not in census_document({})


def test_a_host_name_of_undecodable_bytes_is_saved_as_its_escapes() -> None:
    """socket.gethostname() keeps bytes that are not UTF-8 as lone surrogates (os.fsdecode):
    the census that holds it is still written, the bytes shown as escapes."""
    record = meta(Rank(0, 0, 1, None), host=os.fsdecode(b"node\xff7"), pid=77)
    document = census_document({("step app.py:1", "axpy", "numba"): 2}, record)
    text = render_json(document)
    text.encode("utf-8")  # what write_atomically does
    assert validate(json.loads(text), "c")[RANKS][0]["host"] == "node\\xff7"
