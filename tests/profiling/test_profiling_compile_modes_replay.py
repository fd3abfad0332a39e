"""torch.compile(mode="reduce-overhead"), recorded on the GPU and replayed without one: compile
apart from run (issue 40). Cudagraph trees warm the compiled code up and record its CUDA graph
at build time, `(compile)`; the steady-state calls replay it, the line's run.

tests/data/reduce_overhead_h100.json holds the launch, activity and graph node streams of
tests/gpu/reduce_overhead_demo.py run under `KNAME_NATIVE=0 REDUCE_DEMO_STREAMS=... kname profile
--trace t.json --json p.json -- python reduce_overhead_demo.py` (torch 2.11, batch 1 of this
session); tests/data/reduce_overhead_h100_profile.json is the document that run wrote at its
exit. The launches carry the names the callback gave them there (the torch unit's rules).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.gpu_programs import assert_totals_of_the_live_run, demo_lines, replayed_sites

from kname.callsite import COMPILE_MARK
from kname.profiling.join import replay_join
from kname.profiling.records import NODE_CREATED

DATA = Path(__file__).parent.parent / "data"
STREAMS = DATA / "reduce_overhead_h100.json"
LIVE = DATA / "reduce_overhead_h100_profile.json"
LINE = demo_lines("reduce_overhead_demo.py")
INFER = f"main reduce_overhead_demo.py:{LINE['infer']}"
CALLS = 12


@pytest.fixture(scope="module")
def recorded():
    return replayed_sites(STREAMS)


def test_the_replay_gives_the_totals_the_live_run_wrote(recorded) -> None:
    _, sites = recorded
    assert_totals_of_the_live_run(sites, LIVE)


def test_the_graph_is_recorded_at_build_time_and_replayed_at_the_calling_line(recorded) -> None:
    """What the callback named on the GPU: every node made under `(compile)` (the recording),
    the steady-state graph launches at the line itself."""
    streams, _ = recorded
    made = {node.site for node in streams.graph_nodes if node.event == NODE_CREATED}
    assert made == {INFER + COMPILE_MARK}, made
    launched = [launch.site for launch in streams.launches if launch.graph and not launch.parent]
    assert launched.count(INFER) >= CALLS - 2, launched
    assert set(launched) <= {INFER, INFER + COMPILE_MARK}, set(launched)


def test_steady_state_replays_are_the_lines_run_never_compile(recorded) -> None:
    _, sites = recorded
    replayed = sites[INFER].get("replayed_at", {})
    assert list(replayed) == [INFER], replayed
    assert replayed[INFER]["launches"] % (CALLS - 2) == 0 and replayed[INFER]["launches"]
    for name, site in sites.items():  # no replay labelled (compile) but the recording's own
        marked = [at for at in site.get("replayed_at", {}) if at.endswith(COMPILE_MARK)]
        assert not marked or name == INFER + COMPILE_MARK, (name, marked)


def test_warm_up_and_recording_are_the_lines_compile_time(recorded) -> None:
    _, sites = recorded
    build = sites[INFER + COMPILE_MARK]
    per_replay = sites[INFER]["replayed_at"][INFER]["launches"] // (CALLS - 2)
    assert build["launches"] >= per_replay  # the warm-up ran the compiled code once at least


def test_a_steady_replays_kernel_is_traced_under_the_line_replayed_there(recorded) -> None:
    streams, _ = recorded
    join = replay_join(streams)
    steady = {launch.correlation_id for launch in streams.launches if launch.site == INFER}
    records = [r for r in streams.activities if r.graph_id and r.correlation_id in steady]
    assert records
    for record in records:
        attribution = join.attribution(record)
        assert (attribution.site, attribution.replayed_at) == (INFER, INFER)
