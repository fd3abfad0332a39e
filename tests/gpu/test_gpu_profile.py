"""On a GPU: `kname profile` end to end, by running tests/gpu/profile_demo.py.

Marked `gpu`, skipped without a CUDA driver or without cupti-python. The demo runs twice: with
kname's native CUPTI callback (kname._native_cupti, which conftest builds in place) and with
the Python one (KNAME_NATIVE=0). The demo checks every line itself (CHECK lines) and writes the
recorded streams, which the fixture tests replay without a GPU; here its files are read back
too. The comparison with Proton (two processes, so kernel
times differ a little between them) is left to a run of the demo itself.
"""

from __future__ import annotations

import json

import pytest
from support import REPO, profile_missing_reason, run_profile_demo

from kname.documents.files import load
from kname.profiling.records import load_streams

DEMO = REPO / "tests" / "gpu" / "profile_demo.py"

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(profile_missing_reason() is not None, reason=str(profile_missing_reason()))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_every_line_of_the_demo_shows_its_gpu_time(tmp_path, callbacks):
    done = run_profile_demo(
        DEMO, callbacks, str(tmp_path), "--iterations", "10", "--no-proton", timeout=900
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "PROFILE DEMO PASSED" in output, output[-6000:]
    (collector,) = [line for line in done.stdout.splitlines() if line.startswith("COLLECTOR ")]
    native = collector.startswith("COLLECTOR kname's native CUPTI callback")
    assert native == (callbacks == "native"), collector
    # The activity buffers go with the callback: read in C by the native one.
    assert f"ACTIVITY {callbacks}" in done.stdout.splitlines(), output[-6000:]
    assert "CHECK activity-native-records-whole ok" in output or callbacks == "python"
    # Without a stream log the native path joins in C; the demo checked every line there too.
    assert ("JOIN c" if callbacks == "native" else "JOIN python") in done.stdout.splitlines()
    document = load(str(tmp_path / "profile.json"))
    assert document["unattributed"]["launches"] == 0
    streams = load_streams(str(tmp_path / "profile_h200.json"))
    assert set(streams.meta["expected_sites"].values()) <= {s["name"] for s in document["sites"]}
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert "<svg" in (tmp_path / "profile.html").read_text()
    from_the_command = load(str(tmp_path / "cli" / "profile.json"))  # kname profile -- python ...
    assert from_the_command["unattributed"]["launches"] == 0
