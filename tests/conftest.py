"""Fixtures: kname reset around every test; the NVTX capture library, kname's wheel, and a venv
with it installed (built once per session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import Venv, build_wheel, make_venv
from support.nvtx_capture import InjectionUnavailable, build_injection_library

import kname
from kname import _warnings, callsite, naming


@pytest.fixture(autouse=True)
def fresh_kname(monkeypatch: pytest.MonkeyPatch):
    """Each test starts with kname as a new process has it, and leaves it so.

    No KNAME_* variable, no install, every warning sayable again, path roots taken anew (a test's
    tmp_path on sys.path is a root), no call site or count.
    """
    for variable in [v for v in os.environ if v.startswith("KNAME")]:
        monkeypatch.delenv(variable)
    monkeypatch.setattr(naming, "_roots", None)
    monkeypatch.setattr(_warnings, "_said", set())
    yield
    kname.uninstall()
    kname.enable()
    callsite.clear()


@pytest.fixture(scope="session")
def inject_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NVTX injection library that records what a profiler would see, built once."""
    try:
        return build_injection_library(tmp_path_factory.mktemp("nvtx_inject"))
    except InjectionUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def kname_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kname's wheel, built from this checkout once per session."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def kname_venv(tmp_path_factory: pytest.TempPathFactory, kname_wheel: Path) -> Venv:
    """A fresh venv with kname's wheel installed (shared: tests must not change it)."""
    made = make_venv(tmp_path_factory.mktemp("venv") / "env")
    made.install(str(kname_wheel))
    return made
