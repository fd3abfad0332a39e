"""On a GPU: the example profiles in examples/ are what `kname profile` writes for
examples/cupy_demo.py today (they were recorded on an H100 by examples/record.sh).

Marked `gpu`, skipped without a CUDA driver, cupti-python or CuPy. The call sites and their
launches must be the recorded ones: a change to naming, attribution or the demo that moves
them means recording the examples again (README's profile table is one of them). Kernel names
(cuBLAS picks its GEMM per GPU) and times are not compared.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from support import REPO, profile_missing_reason
from support.gpu_programs import profiled_run

from kname.documents.schema import RANKS

DEMO = REPO / "examples" / "cupy_demo.py"

pytestmark = pytest.mark.gpu


def _missing() -> str | None:
    missing = profile_missing_reason()
    if missing is None and importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    return missing


@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_the_example_profile_is_what_kname_profile_writes_for_the_demo(tmp_path, callbacks):
    missing = _missing()
    if missing:
        pytest.skip(missing)
    profile, _ = profiled_run(DEMO, tmp_path, callbacks, done="cupy demo: 20 steps")
    recorded = json.loads((REPO / "examples" / "profile.json").read_text())
    made = {site["name"]: site["launches"] for site in profile["sites"]}
    assert made == {site["name"]: site["launches"] for site in recorded["sites"]}
    assert profile["unattributed"]["launches"] == 0
    (record,) = profile[RANKS]
    assert record["program"] == "cupy_demo.py" and record["written"].endswith("Z")
