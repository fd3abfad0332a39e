"""On a GPU: a JAX training program under `kname profile` with no settings names its GPU time
after the program's own lines (tests/gpu/jax_demo.py, the program of issue 39).

Marked `gpu`, skipped without a CUDA driver, cupti-python or a GPU build of jax. Runs
`kname profile --json profile.json -- python jax_demo.py` from kname's checkout, once per
launch callback (native, Python), each in a fresh process, so that every jitted function
compiles and XLA autotunes at its first call.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest
from support import REPO, profile_missing_reason

from kname import hotpath
from kname.callsite import COMPILE_MARK
from kname.documents.files import load
from kname.profiling.capture import NO_PYTHON_FRAME

DEMO = REPO / "tests" / "gpu" / "jax_demo.py"
SOURCE = DEMO.read_text()
MARKED = {
    number: match[1]
    for number, text in enumerate(SOURCE.splitlines(), 1)
    if (match := re.search(r"#\s*site:\s*(\S+)\s*$", text))
}
LINE = {marker: number for number, marker in MARKED.items()}
SITE = re.compile(r"(?P<function>\S+) (?P<path>\S+):(?P<line>\d+)(?P<compile> \(compile\))?")
STEPS = 20  # as jax_demo.py has them

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
    native, why = hotpath.choose(True).cupti()
    if callbacks == "native" and native is None:
        pytest.skip(f"no native CUPTI callback: {why}")
    shutil.copy(DEMO, tmp_path / "jax_demo.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    # kname from the checkout, before what the machine adds (cupti-python carried as a wheel).
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    env["KNAME_NATIVE"] = "1" if callbacks == "native" else "0"  # which callback, nothing else
    command = [sys.executable, "-m", "kname", "profile", "--json", "profile.json", "--",
               sys.executable, "jax_demo.py"]  # fmt: skip
    done = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "JAX DEMO DONE" in done.stdout, output[-6000:]
    assert "internal error" not in output, output[-6000:]

    document = load(str(tmp_path / "profile.json"))
    print(done.stderr[-4000:])  # the table, for the log of the run
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
