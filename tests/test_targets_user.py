"""KNAME_TARGETS `module:qualname` entries: which are refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO

# --------------------------------------------------------------------------
# Targets kname itself runs on: refused with one line
# --------------------------------------------------------------------------

RUNS_ON = [
    "builtins:len",
    "builtins:isinstance",
    "builtins:getattr",
    "sys:_getframe",
    "os.path:join",
    "threading:Thread.run",
    "importlib:import_module",
    "itertools:count",
    "kname.callsite:resolve",
    "wrapt:FunctionWrapper",
    "nvtx:push_range",
    "numpy:asarray",
]


def test_targets_kname_runs_on_are_refused_with_one_line_each(tmp_path) -> None:
    # In a subprocess: on the code before the fix, builtins:len spun forever after a
    # RecursionError.
    done = run_program(
        f"""
        import importlib, kname
        for entry in {RUNS_ON!r}:
            module_name, qualname = entry.split(":")
            owner = importlib.import_module(module_name)
            *path, attribute = qualname.split(".")
            for part in path:
                owner = getattr(owner, part)
            before = vars(owner)[attribute]
            kname.install(targets=[entry])
            assert vars(owner)[attribute] is before, entry
            kname.uninstall()
        print("done")
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    lines = done.stderr.splitlines()
    assert len(lines) == len(RUNS_ON), lines
    for entry, line in zip(RUNS_ON, lines, strict=True):
        assert line.startswith(f"kname: install(targets=...) entry {entry!r} is refused"), line


def run_program(source: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    (tmp_path / "prog.py").write_text(textwrap.dedent(source))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("KNAME", "NVTX_"))}
    environ.update(PYTHONPATH=f"{REPO}:{tmp_path}", NUMBA_ENABLE_CUDASIM="1", **env)
    return subprocess.run([sys.executable, "prog.py"], capture_output=True, text=True,
                          env=environ, cwd=tmp_path, timeout=60, check=False)  # fmt: skip


@pytest.mark.parametrize("entry", ["builtins:len", "builtins:isinstance", "builtins:getattr"])
def test_a_builtin_beside_numba_is_refused_and_numba_still_named(entry: str, tmp_path) -> None:
    done = run_program(
        """
        import kname
        kname.install()
        import numpy as np
        from numba import cuda

        @cuda.jit
        def fill(out):
            out[cuda.grid(1)] = len(out)

        out = np.zeros(4)
        fill[1, 4](out)
        print(list(kname.names().values()), out.tolist())
        """,
        tmp_path,
        KNAME_TARGETS=f"numba,{entry}",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"kname: KNAME_TARGETS entry {entry!r} is refused"), lines
    assert done.stdout.strip() == "[1] [4.0, 4.0, 4.0, 4.0]"
