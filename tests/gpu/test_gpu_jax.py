"""On a GPU: a JAX training program under `kname profile` with no settings names its GPU time
after the program's own lines (tests/gpu/jax_demo.py, the program of issue 39).

The jitted step is called from two lines (twenty calls, then five): XLA builds its CUDA graph
inside a call of the first and replays it from both; each line's replays are its own.

Marked `gpu`, skipped without a CUDA driver, cupti-python or a GPU build of jax. Runs
`kname profile --json profile.json -- python jax_demo.py` from kname's checkout, once per
launch callback (native, Python), each in a fresh process, so that every jitted function
compiles and XLA autotunes at its first call.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from support import REPO, profile_missing_reason
from support.gpu_programs import SITE, marked_lines, profiled_run

from kname.callsite import COMPILE_MARK
from kname.profiling.capture import NO_PYTHON_FRAME

DEMO = REPO / "tests" / "gpu" / "jax_demo.py"
MARKED = marked_lines(DEMO)
LINE = {marker: number for number, marker in MARKED.items()}
STEPS, MORE_STEPS = 20, 5  # as jax_demo.py has them

pytestmark = pytest.mark.gpu


def _missing() -> str | None:
    missing = profile_missing_reason()
    if missing is not None:
        return missing
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("optax") is None:
        return "jax or optax is not installed"
    probe = [sys.executable, "-c", "import jax; assert jax.default_backend() == 'gpu'"]
    if subprocess.run(probe, capture_output=True, timeout=300, check=False).returncode:
        return "jax has no GPU backend here"
    return None


def own_share(document: dict) -> float:
    """The share of the profile's GPU time at jax_demo.py's lines (compile work included)."""
    total = sum(site["gpu_ns"] for site in document["sites"]) + document["unattributed"]["gpu_ns"]
    own = sum(
        site["gpu_ns"]
        for site in document["sites"]
        if (match := SITE.fullmatch(site["name"])) and match["path"] == "jax_demo.py"
    )
    return own / total if total else 0.0


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
@pytest.mark.parametrize("callbacks", ["native", "python"])
def test_a_jax_program_is_named_after_its_own_lines_only(tmp_path, callbacks) -> None:
    document, _ = profiled_run(DEMO, tmp_path, callbacks, "JAX DEMO DONE")
    sites = {site["name"]: site for site in document["sites"]}
    total = sum(site["gpu_ns"] for site in sites.values())
    # At least 99% of the GPU time at the program's own lines; no frameless work above 1%.
    assert own_share(document) >= 0.99, sorted(sites)
    frameless = sum(s["gpu_ns"] for n, s in sites.items() if n.startswith(NO_PYTHON_FRAME))
    assert frameless <= 0.01 * total, sites.get(NO_PYTHON_FRAME)
    # Every line named is one of the program's marked lines, compile work marked apart.
    for name in sites:
        match = SITE.fullmatch(name)
        if match and match["path"] == "jax_demo.py":
            assert int(match["line"]) in MARKED, name
    step = f"main jax_demo.py:{LINE['step']}"
    assert sites[step]["launches"] >= STEPS
    assert step + COMPILE_MARK in sites, sorted(sites)  # XLA's compile and autotuning
    for marker in ("vmap", "scan", "eager"):
        assert f"main jax_demo.py:{LINE[marker]}" in sites, marker
    # XLA's CUDA graph for the step, built at the first line's call, replayed from each line:
    # each line's replays are its own.
    again = f"main jax_demo.py:{LINE['step-again']}"
    assert list(sites[again].get("replayed_at", {})) == [again], sites.get(again)
    assert again not in sites[step].get("replayed_at", {}), sites[step].get("replayed_at")
    per_call = sites[again]["replayed_at"][again]["launches"] / MORE_STEPS
    # (the first line's first calls run before XLA has its graph: at most two)
    assert sites[step]["replayed_at"][step]["launches"] >= per_call * (STEPS - 2)
