"""Recorded streams: their JSON form, and replays of streams recorded on a GPU.

tests/gpu/profile_demo.py records the launch and activity streams of a real program (numba,
CuPy, torch with cuBLAS and a CUDA graph, Triton, copies and sets, two threads) into
tests/data/profile_*.json. Each such file is replayed here without a GPU: every GPU record must
go to a call site, every marked line of the demo must show GPU time, and the replay must give
the totals the live run printed. tests/gpu/graphs_demo.py records CUDA graphs captured, built
node by node, updated and replayed (with their graph node records) into tests/data/graphs_*.json:
each replayed GPU record must go to the line that captured or added its node, under the lines
that replayed it, as the live run printed.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import pytest
from hypothesis import given
from support.profile_streams import streams

from kname.documents.build import profile_document
from kname.documents.pages.profile import render_profile_page as render_page
from kname.documents.schema import validate
from kname.profiling.join import replay
from kname.profiling.records import StreamsError, load_streams, streams_from_json, streams_to_json
from kname.profiling.trace import trace_json

FIXTURES = sorted((Path(__file__).parent.parent / "data").glob("profile_*.json"))
GRAPH_FIXTURES = sorted((Path(__file__).parent.parent / "data").glob("graphs_*.json"))


@given(streams())
def test_streams_survive_their_json_form(stream):
    assert streams_from_json(streams_to_json(stream), "s.json") == stream


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "not kname streams of format 1, 2 or 3"),
        ('{"kname_streams": 4}', "not kname streams of format 1, 2 or 3"),
        ('{"kname_streams": 1, "launches": [{"nope": 1}], "activities": []}', "malformed record"),
        (
            '{"kname_streams": 1, "launches": [], "activities": [{"kind": "copy", '
            '"correlation_id": 1, "name": "x", "start": 0, "end": 0}]}',
            "malformed record",
        ),
    ],
)
def test_a_bad_stream_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(StreamsError, match=message) as caught:
        load_streams(str(path))
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_a_recorded_program_replays_with_every_line_attributed(path):
    recorded = load_streams(str(path))
    meta = recorded.meta
    profile = replay(recorded)
    assert profile.unattributed.launches == 0, profile.unattributed.kernels
    assert profile.total_gpu_ns == sum(r.duration for r in recorded.activities)
    assert profile.total_launches == len(recorded.activities)
    document = validate(profile_document(profile), path.name)
    sites = {site["name"]: site for site in document["sites"]}
    for marker, name in meta["expected_sites"].items():
        assert name in sites, f"{marker}: {name} has no GPU time"
        assert sites[name]["gpu_ns"] > 0 and sites[name]["launches"] >= meta["iterations"]
    kinds = meta.get("expected_kinds", {})
    by_site: dict[str, set] = {}
    site_of = {launch.correlation_id: launch.site for launch in recorded.launches}
    for record in recorded.activities:
        facts = (record.kind, bool(record.graph_id))
        by_site.setdefault(site_of.get(record.correlation_id, ""), set()).add(facts)
    for marker, kind in kinds.items():
        seen = by_site[meta["expected_sites"][marker]]
        if kind == "graph":
            assert ("kernel", True) in seen, marker
        else:
            assert (kind, False) in seen, marker
    if "live_totals" in meta:  # what the live join printed on the GPU machine
        totals = {name: [s["launches"], s["gpu_ns"]] for name, s in sites.items()}
        assert totals == meta["live_totals"]


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_a_recorded_program_makes_a_trace_and_a_page(path):
    recorded = load_streams(str(path))
    events = json.loads(trace_json(recorded))["traceEvents"]
    timed = sum(1 for r in recorded.activities if r.start) + sum(
        1 for r in recorded.launches if r.start
    )
    assert sum(1 for e in events if e["ph"] == "X") == timed
    page = render_page(profile_document(replay(recorded)))
    for name in recorded.meta["expected_sites"].values():
        assert f'<tr data-site="{escape(name)}">' in page


@pytest.mark.parametrize("path", GRAPH_FIXTURES, ids=[p.name for p in GRAPH_FIXTURES])
def test_a_recorded_graph_program_replays_each_kernel_to_its_capture_line(path):
    recorded = load_streams(str(path))
    meta = recorded.meta
    assert recorded.graph_nodes, "no graph node record: recorded before kname read them?"
    profile = replay(recorded)
    assert profile.unattributed.launches == 0, profile.unattributed.kernels
    assert profile.total_gpu_ns == sum(r.duration for r in recorded.activities)
    document = validate(profile_document(profile), path.name)
    sites = {site["name"]: site for site in document["sites"]}
    assert not [name for name, site in sites.items() if "replayed_unseen" in site]
    for marker, name in meta["captures"].items():
        assert sorted(sites[name].get("replayed_at", {})) == meta["replayed_at"][marker], marker
        assert sites[name]["gpu_ns"] > 0
    totals = {
        name: [s["launches"], s["gpu_ns"], s.get("replayed_at", {})] for name, s in sites.items()
    }
    assert totals == meta["live_totals"]
    events = [e for e in json.loads(trace_json(recorded))["traceEvents"] if e["ph"] == "X"]
    for marker, name in meta["captures"].items():
        mine = [e for e in events if e["name"].startswith(f"{name} / ")]
        # A line that also runs eagerly (torch.compile's first calls) has kernels of no graph.
        replayed = [e for e in mine if e["args"].get("graph_id")]
        assert replayed and all(
            e["args"].get("replayed_at") in meta["replayed_at"][marker] for e in replayed
        ), marker
        eager = marker.split("-")[0] in meta.get("eager", ())
        assert eager or len(replayed) == len(mine), marker
