"""On a GPU: the launch-bound verdict (issue 40) marks a loop of tiny kernels launch-bound and a
large matmul not (tests/gpu/verdict_demo.py).

Marked `gpu`, skipped without a CUDA driver, cupti-python or a CUDA build of torch. Runs
`KNAME_PROFILE_VERDICT=1 kname profile --json profile.json -- python verdict_demo.py` from
kname's checkout, once per launch callback (native, Python), each in a fresh process: the
profile's `launch_times` of the two lines, their verdict, and the table's verdict column and
advice.
"""

from __future__ import annotations

import pytest
from support import REPO, torch_profile_missing_reason
from support.gpu_programs import SITE, marked_lines, profiled_run

from kname.documents.verdict import LAUNCH_BOUND, LAUNCH_TIMES, site_verdict

DEMO = REPO / "tests" / "gpu" / "verdict_demo.py"
LINE = {marker: number for number, marker in marked_lines(DEMO).items()}
TINY_LAUNCHES, MATMULS = 200, 4  # as verdict_demo.py has them

pytestmark = pytest.mark.gpu
MISSING = torch_profile_missing_reason()


def site_at(document: dict, marker: str) -> dict:
    """The profile's site of verdict_demo.py's line marked `marker`."""
    found = [
        site
        for site in document["sites"]
        if (match := SITE.fullmatch(site["name"]))
        and match["path"] == "verdict_demo.py"
        and int(match["line"]) == LINE[marker]
    ]
    assert len(found) == 1, [site["name"] for site in document["sites"]]
    return found[0]


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_a_loop_of_tiny_kernels_is_launch_bound_and_a_large_matmul_is_not(
    tmp_path, callbacks
) -> None:
    # KNAME_PROFILE_VERDICT (what --verdict sets) times the native callback's launch calls; the
    # Python callback times every call anyway.
    verdict = {"KNAME_PROFILE_VERDICT": "1"}
    document, run = profiled_run(DEMO, tmp_path, callbacks, "VERDICT DEMO DONE", **verdict)
    tiny, matmul = site_at(document, "tiny"), site_at(document, "matmul")
    print({name: site.get(LAUNCH_TIMES) for name, site in (("tiny", tiny), ("matmul", matmul))})
    # Every launch call of the loop timed, once, and its kernels' GPU time below its CPU time.
    assert tiny["launches"] == TINY_LAUNCHES
    assert tiny[LAUNCH_TIMES]["calls"] == TINY_LAUNCHES
    assert site_verdict(tiny) == LAUNCH_BOUND
    assert tiny[LAUNCH_TIMES]["idle_ns"] > 0  # the GPU waited on the loop's launches
    # Milliseconds of GPU time for each launch call: not launch-bound.
    assert matmul[LAUNCH_TIMES]["calls"] >= MATMULS
    assert site_verdict(matmul) == ""
    # The table says so in its verdict column, and advises the tiny line in one line.
    rows = [line for line in run.stderr.splitlines() if f"verdict_demo.py:{LINE['tiny']} " in line]
    assert any(LAUNCH_BOUND in row for row in rows), run.stderr[-4000:]
    advice = f"verdict_demo.py:{LINE['tiny']} is {LAUNCH_BOUND}: one kernel launched"
    assert advice in run.stderr, run.stderr[-4000:]
