"""A JAX program's streams, recorded on the H100 and replayed without a GPU: XLA's compile work on
its own threads joined to the line that caused the compile, the run's kernels and XLA's CUDA
graph replays to the calling line.

tests/data/jax_h100.json holds the launch, activity and graph node streams of tests/gpu/jax_demo.py
run under `KNAME_NATIVE=0 JAX_DEMO_STREAMS=jax_h100.json kname profile --trace t.json --json
p.json -- python jax_demo.py` (jax 0.11, H100); tests/data/jax_h100_profile.json is the document
that run wrote at its exit (p.json). The streams' launches carry the names the callback gave
them on the GPU (compile scopes included), and the thread each came from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.gpu_programs import assert_totals_of_the_live_run, demo_lines, replayed_sites

from kname.callsite import COMPILE_MARK
from kname.profiling.capture import NO_PYTHON_FRAME
from kname.profiling.records import NODE_CREATED

DATA = Path(__file__).parent.parent / "data"
STREAMS = DATA / "jax_h100.json"
LIVE = DATA / "jax_h100_profile.json"
LINE = demo_lines("jax_demo.py")
STEPS, MORE_STEPS = 20, 5  # as jax_demo.py calls the step from its two lines
OWN = re.compile(r"\S+ jax_demo\.py:(\d+)( \(compile\))?")


@pytest.fixture(scope="module")
def recorded():
    return replayed_sites(STREAMS)


def test_the_replay_gives_the_totals_the_live_run_wrote(recorded) -> None:
    _, sites = recorded
    assert_totals_of_the_live_run(sites, LIVE)


def test_at_least_99_percent_of_the_gpu_time_is_at_the_programs_own_marked_lines(
    recorded,
) -> None:
    _, sites = recorded
    total = sum(site["gpu_ns"] for site in sites.values())
    own = {name: site for name, site in sites.items() if OWN.fullmatch(name)}
    assert sum(site["gpu_ns"] for site in own.values()) >= 0.99 * total
    assert sites.get(NO_PYTHON_FRAME, {"gpu_ns": 0})["gpu_ns"] <= 0.01 * total
    for name in own:
        assert int(OWN.fullmatch(name)[1]) in LINE.values(), name


def test_xlas_compile_work_on_its_own_threads_is_the_compiling_lines_marked_compile(
    recorded,
) -> None:
    """The jitted step's first call compiles and autotunes (RedzoneAllocator kernels, host
    copies) on XLA's threads, with no Python frame: the compile scope names them."""
    streams, sites = recorded
    main_thread = streams.meta["main_thread"]
    step = f"main jax_demo.py:{LINE['step']}"
    compiling = [launch for launch in streams.launches if launch.site == step + COMPILE_MARK]
    assert compiling and all(launch.thread != main_thread for launch in compiling)
    kernels = sites[step + COMPILE_MARK]["kernels"]
    assert any("RedzoneAllocator" in kernel for kernel in kernels), sorted(kernels)
    assert sites[step + COMPILE_MARK]["gpu_ns"] > sites[step]["gpu_ns"]  # autotuning dominates


def test_the_cached_steps_graph_replays_go_to_the_line_calling_them(recorded) -> None:
    """XLA runs the step as a CUDA graph (a command buffer) that it builds inside a call of the
    first line; that line's cached calls and the second line's replay it from the main thread:
    each line's replays are its own, never the first line's."""
    streams, sites = recorded
    main_thread = streams.meta["main_thread"]
    step = f"main jax_demo.py:{LINE['step']}"
    again = f"main jax_demo.py:{LINE['step-again']}"
    made = {node.site for node in streams.graph_nodes if node.event == NODE_CREATED}
    assert step in made and again not in made  # built at the first line only
    for line, calls in ((step, STEPS - 2), (again, MORE_STEPS)):
        replays = [launch for launch in streams.launches if launch.site == line and launch.graph]
        assert len(replays) >= calls and all(launch.thread == main_thread for launch in replays)
        assert list(sites[line]["replayed_at"]) == [line], sites[line]["replayed_at"]
        assert "replayed_unseen" not in sites[line]
    per_call = sites[again]["replayed_at"][again]["launches"] / MORE_STEPS
    assert per_call >= 1 and sites[step]["replayed_at"][step]["launches"] >= per_call * (STEPS - 2)
