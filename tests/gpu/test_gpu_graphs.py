"""On a GPU: `kname profile` and CUDA graphs end to end, by running tests/gpu/graphs_demo.py.

Marked `gpu`, skipped without a CUDA driver or without cupti-python. The demo runs twice: with
kname's native CUPTI callback (kname._native_cupti, which conftest builds in place) and with
the Python one (KNAME_NATIVE=0). It captures torch, CuPy and cuda.core graphs (stream capture,
node by node, updated) and torch.compile(mode="reduce-overhead") while kname profiles, replays
them, and checks every captured line itself (CHECK lines): its replayed launches (one per replay
per kernel) and GPU time, the replay lines as its parents, nothing unattributed, in every output.
Its recorded streams, written here, are what tests/data/graphs_h200.json is (replayed without a
GPU by tests/profiling/test_profiling_records.py).
"""

from __future__ import annotations

import pytest
from support import REPO, profile_missing_reason, run_profile_demo

from kname.documents.files import load
from kname.profiling.join import replay
from kname.profiling.records import load_streams

DEMO = REPO / "tests" / "gpu" / "graphs_demo.py"

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(profile_missing_reason() is not None, reason=str(profile_missing_reason()))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_every_captured_line_shows_its_replayed_kernels_under_its_replay_lines(tmp_path, callbacks):
    done = run_profile_demo(DEMO, callbacks, str(tmp_path), "--replays", "20", timeout=1200)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "GRAPHS DEMO PASSED" in output, output[-8000:]
    lines = done.stdout.splitlines()
    (collector,) = [line for line in lines if line.startswith("COLLECTOR ")]
    native_used = collector.startswith("COLLECTOR kname's native CUPTI callback")
    assert native_used == (callbacks == "native"), collector
    assert ("JOIN c" if callbacks == "native" else "JOIN python") in lines
    assert not [line for line in lines if line.startswith("SKIP torch")], "torch is needed here"
    document = load(str(tmp_path / "graphs.json"))
    assert document["unattributed"]["launches"] == 0
    streams = load_streams(str(tmp_path / "graphs_h200.json"))
    sites = {site["name"]: site for site in document["sites"]}
    for marker, name in streams.meta["captures"].items():
        assert sorted(sites[name]["replayed_at"]) == streams.meta["replayed_at"][marker], marker
    replayed = replay(streams)
    assert {n: s.replays.keys() for n, s in replayed.sites.items()} == {
        n: s.get("replayed_at", {}).keys() for n, s in sites.items()
    }
