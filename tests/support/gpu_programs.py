"""A framework's demo program (tests/gpu/<name>_demo.py) under `kname profile`, as the gpu tests
of torch and JAX run it: its marked lines, and the profile its run wrote."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kname import hotpath
from kname.documents.build import profile_document
from kname.documents.files import load
from kname.documents.schema import validate
from kname.profiling.join import replay
from kname.profiling.records import Streams, load_streams
from support import REPO

# A call site's name as KNAME_FORMAT's default writes it, `(compile)` after it for build work.
SITE = re.compile(r"(?P<function>\S+) (?P<path>\S+):(?P<line>\d+)(?P<compile> \(compile\))?")


def marked_lines(program: Path) -> dict[int, str]:
    """Each line of `program` marked `# site: MARKER`, by number."""
    return {
        number: match[1]
        for number, text in enumerate(program.read_text().splitlines(), 1)
        if (match := re.search(r"#\s*site:\s*(\S+)\s*$", text))
    }


def demo_lines(demo: str) -> dict[str, int]:
    """{marker: line number} of the demo program tests/gpu/`demo` (its `# site:` marks)."""
    marked = marked_lines(REPO / "tests" / "gpu" / demo)
    return {marker: number for number, marker in marked.items()}


def replayed_sites(streams: Path) -> tuple[Streams, dict[str, dict]]:
    """Streams recorded on the GPU, and the sites (by name) of the validated profile that
    replaying them without a GPU gives."""
    recorded = load_streams(str(streams))
    document = validate(profile_document(replay(recorded)), streams.name)
    return recorded, {site["name"]: site for site in document["sites"]}


def assert_totals_of_the_live_run(sites: dict[str, dict], live: Path) -> None:
    """The replayed `sites` have the numbers (and graph work) of the profile the live run wrote."""
    written = {site["name"]: site for site in load(str(live))["sites"]}
    assert sites.keys() == written.keys()
    for name, site in sites.items():
        fields = ("launches", "gpu_ns", "replayed_at", "replayed_unseen")
        assert [site.get(f) for f in fields] == [written[name].get(f) for f in fields], name


def profiled_run(
    program: Path, tmp_path: Path, callbacks: str, done: str, **settings: str
) -> tuple[dict, subprocess.CompletedProcess]:
    """`kname profile --json profile.json -- python PROGRAM` in tmp_path, on the `callbacks`
    launch callback ("native" or "python"; skipped where the native one is not built): the
    profile it wrote and the run. `settings` are variables set for the run (KNAME_* ones too);
    the program prints `done` as its last line."""
    native, why = hotpath.choose(True).cupti()
    if callbacks == "native" and native is None:
        pytest.skip(f"no native CUPTI callback: {why}")
    shutil.copy(program, tmp_path / program.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    # kname from the checkout, before what the machine adds (cupti-python carried as a wheel).
    paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env.update(settings, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    env["KNAME_NATIVE"] = "1" if callbacks == "native" else "0"  # which callback, nothing else
    command = [sys.executable, "-m", "kname", "profile", "--json", "profile.json", "--",
               sys.executable, program.name]  # fmt: skip
    run = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0 and done in run.stdout, output[-6000:]
    assert "internal error" not in output, output[-6000:]
    print(run.stderr[-4000:])  # the table, for the log of the run
    return load(str(tmp_path / "profile.json")), run
