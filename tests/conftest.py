"""Fixtures: kname reset around every test, the hot path it runs under; the NVTX capture library,
kname's wheel, and a venv with it installed (built once per session)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import HOT_PATH_VARIABLE, Venv, build_extensions_in_place, build_wheel, make_venv
from support.nvtx_capture import InjectionUnavailable, build_injection_library

import kname
from kname import _warnings, callsite, hotpath, naming

# Test modules whose every test runs twice: on the pure-Python per-launch wrapper and on the C one.
BOTH_HOT_PATHS = {
    "test_callsite", "test_callsite_bounds", "test_callsite_faults", "test_census", "test_ipython",
    "test_launch", "test_lifecycle", "test_profile_capture", "test_profile_mode",
    "test_profile_session", "test_reliability_async", "test_targets_user",
    "test_launch_function_names",
    "test_reliability", "test_reliability_concurrency", "test_reliability_imports",
    "test_reliability_resources", "test_rename", "test_rename_libraries", "test_targets_cuda_core",
    "test_targets_cupy", "test_targets_pycuda", "test_targets_triton", "test_targets_torch",
}  # fmt: skip
HOT_PATHS = {"python": "0", "native": "1"}  # KNAME_NATIVE for each


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build kname's C extensions into the checkout (tests import kname from it), as
    `pip install` builds them into a wheel."""
    problem = build_extensions_in_place()
    if problem:
        print(f"kname's extensions, built for the tests:\n{problem}", file=sys.stderr)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__ in BOTH_HOT_PATHS:
        metafunc.parametrize("hot_path", list(HOT_PATHS), indirect=True)


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


@pytest.fixture(autouse=True)
def hot_path(request: pytest.FixtureRequest, fresh_kname, monkeypatch: pytest.MonkeyPatch):
    """The per-launch wrapper of this test: "python" or "native" in the BOTH_HOT_PATHS modules
    (KNAME_NATIVE, inherited by its child processes), else the default (None)."""
    path = getattr(request, "param", None)
    if path is None:
        yield None
        return
    why_not_native = hotpath.choose(True).why_python
    if path == "native" and why_not_native:
        pytest.skip(f"no native hot path here: {why_not_native}")
    monkeypatch.setenv(HOT_PATH_VARIABLE, HOT_PATHS[path])
    yield path
    # A test that cleaned its environment must have kept the variable (support.cleaned).
    assert os.environ.get(HOT_PATH_VARIABLE) == HOT_PATHS[path], "the test dropped KNAME_NATIVE"


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
