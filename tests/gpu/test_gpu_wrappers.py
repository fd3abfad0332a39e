"""On a GPU: kname profile names the same lines, with the same launch counts, whether kname's
library launch wrappers are in the call path or taken out of it while the profile collects
(kname.profiling.wrappers: the native callback names every launch from the frame), by running
tests/gpu/wrappers_demo.py (numba-cuda, CuPy, torch and Triton launches from a loop's lines).

Marked `gpu`, skipped without cupti-python or a library of the mixed program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import REPO, profile_missing_reason

DEMO = REPO / "tests" / "gpu" / "wrappers_demo.py"

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(profile_missing_reason() is not None, reason=str(profile_missing_reason()))
def test_the_lines_and_their_launches_are_the_same_with_the_wrappers_out(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    done = subprocess.run(
        [sys.executable, str(DEMO)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    runs = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("RUN ")]
    kept, out = runs
    assert (kept["keep"], kept["out"], out["keep"], out["out"]) == (True, False, False, True)
    assert out["sites"] == kept["sites"], done.stdout[-4000:]
    (lines,) = [line for line in done.stdout.splitlines() if line.startswith("LINES ")]
    assert len(kept["sites"]) >= len(json.loads(lines[6:].split(" SKIPPED ")[0])) > 0
