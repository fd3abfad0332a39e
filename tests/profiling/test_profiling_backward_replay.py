"""Backward per forward line on streams recorded on the H100 and replayed without a GPU.

tests/data/backward_h100.json holds the launch and activity streams of two training steps of
tests/gpu/backward_demo.py (a small transformer, bf16 autocast, AdamW; torch 2.11), recorded by
`BACKWARD_DEMO_STEPS=2 kname profile --json p.json --trace t.json -- python
tests/gpu/backward_record.py backward_h100.json` with the native callback;
tests/data/backward_h100_profile.json is the document that run wrote at its exit (p.json). Each
backward launch carries the name the callback gave it on the GPU: the backward() line and the
forward line of the autograd node that was running."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gpu_programs import demo_lines

from kname.documents.backward_lines import (
    BACKWARD_LINES_NS,
    BACKWARD_NS,
    BACKWARD_UNKNOWN_NS,
    split_backward_site,
)
from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.schema import validate
from kname.documents.tables import render_profile_table
from kname.profiling.join import replay
from kname.profiling.records import load_streams

DATA = Path(__file__).parent.parent / "data"
STREAMS = DATA / "backward_h100.json"
LIVE = DATA / "backward_h100_profile.json"
LINE = demo_lines("backward_demo.py")


def name(sites: dict, marker: str) -> str:
    """The site of the demo's line marked `marker`."""
    (found,) = [n for n in sites if n.endswith(f"backward_demo.py:{LINE[marker]}")]
    return found


@pytest.fixture(scope="module")
def replayed():
    streams = load_streams(str(STREAMS))
    document = validate(profile_document(replay(streams)), STREAMS.name)
    return streams, document


@pytest.fixture
def sites(replayed):
    return {site["name"]: site for site in replayed[1]["sites"]}


def test_the_replay_gives_the_fields_the_live_run_wrote(sites) -> None:
    live = {site["name"]: site for site in load(str(LIVE))["sites"]}
    assert sites.keys() == live.keys()
    for site_name, site in sites.items():
        assert {k: v for k, v in site.items() if k != "share"} == {
            k: v for k, v in live[site_name].items() if k != "share"
        }, site_name


def test_backward_launches_were_recorded_under_their_pass_and_forward_line(replayed) -> None:
    streams, _ = replayed
    pairs = {split_backward_site(launch.site) for launch in streams.launches} - {None}
    passes = {pass_ for pass_, _ in pairs}
    assert passes == {f"step backward_demo.py:{LINE['backward']}"}
    forward = {line.rsplit(":", 1)[1] for _, line in pairs}
    assert {str(LINE["attention"]), str(LINE["mlp"]), str(LINE["qkv"])} <= forward


def test_the_attention_and_mlp_lines_show_backward_time(sites) -> None:
    for marker in ("attention", "mlp", "qkv", "proj", "embed", "head", "loss"):
        assert sites[name(sites, marker)].get(BACKWARD_NS, 0) > 0, marker


def test_the_forward_lines_backward_times_add_up_to_the_backward_lines_within_2_percent(sites):
    pass_row = sites[name(sites, "backward")]
    charged = sum(site.get(BACKWARD_NS, 0) for site in sites.values())
    assert pass_row[BACKWARD_LINES_NS] == charged
    assert BACKWARD_UNKNOWN_NS not in pass_row
    assert pass_row["gpu_ns"] - charged <= 0.02 * pass_row["gpu_ns"]


def test_the_table_shows_forward_and_backward_in_their_columns(replayed) -> None:
    table = render_profile_table(replayed[1]).splitlines()
    assert table[1].split()[:5] == ["call", "site", "GPU", "time", "backward"]
    mlp = next(line for line in table if f"backward_demo.py:{LINE['mlp']} " in line)
    assert mlp.split()[2:6] == ["92.1", "us", "246", "us"]
