"""Session fixtures: the NVTX capture library, kname's wheel, and a venv with it installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvtx_capture import InjectionUnavailable, build_injection_library
from support import Venv, build_wheel, make_venv


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
