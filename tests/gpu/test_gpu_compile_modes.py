"""On a GPU: torch.compile's modes keep compile apart from run (issue 40, its third part).

tests/gpu/reduce_overhead_demo.py calls a `mode="reduce-overhead"` function twelve times from one
line under `kname profile --json profile.json` with no settings, once per launch callback
(native, Python), each in a fresh process (Inductor's cache may be warm: the warm-up and the
recording still run at the first calls). Its steady-state calls replay a CUDA graph (cudagraph
trees): their GPU time is the line's, never `(compile)`; the warm-up and the recording are
`(compile)` on the same line.

Marked `gpu`, skipped without a CUDA driver, cupti-python or torch with CUDA.
"""

from __future__ import annotations

import pytest
from support import REPO, torch_profile_missing_reason
from support.gpu_programs import marked_lines, profiled_run

from kname.callsite import COMPILE_MARK

DEMO = REPO / "tests" / "gpu" / "reduce_overhead_demo.py"
LINE = {marker: number for number, marker in marked_lines(DEMO).items()}
CALLS = 12  # as reduce_overhead_demo.py has them
# At most the first two calls warm up and record (cudagraph trees: warm-up, then record+replay).
STEADY = CALLS - 2

pytestmark = pytest.mark.gpu
MISSING = torch_profile_missing_reason()


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_reduce_overhead_replays_are_the_lines_run_and_its_warm_up_compile_time(
    tmp_path, callbacks
) -> None:
    document, _ = profiled_run(DEMO, tmp_path, callbacks, "REDUCE OVERHEAD DEMO DONE")
    sites = {site["name"]: site for site in document["sites"]}
    line = f"main reduce_overhead_demo.py:{LINE['infer']}"
    assert line in sites and line + COMPILE_MARK in sites, sorted(sites)
    steady, build = sites[line], sites[line + COMPILE_MARK]
    # The steady state: graph replays launched at the line, counted there, never (compile).
    replayed = steady.get("replayed_at", {})
    assert list(replayed) == [line], replayed
    # (each call also copies its input into the graph's: a plain launch at the line)
    kernels_per_replay = replayed[line]["launches"] // STEADY
    assert kernels_per_replay >= 1 and replayed[line]["launches"] % STEADY == 0, replayed
    # The warm-up ran the compiled code eagerly, the recording replayed it once: compile time.
    assert build["launches"] >= kernels_per_replay, build
    # No replay is labelled (compile) but the recording's own, on the compile-time row.
    for name, site in sites.items():
        marked = [at for at in site.get("replayed_at", {}) if at.endswith(COMPILE_MARK)]
        assert not marked or name == line + COMPILE_MARK, (name, marked)
