"""Fixtures: kname reset around every test, the hot path it runs under; the NVTX capture library,
kname's wheel, and a venv with it installed (built once per run, shared by pytest-xdist's workers).

A test whose outcome depends on the per-launch wrapper (the hot path) is marked `launches`: it
runs on each hot path `--hot-path` names (`python`, `native` or `both`, the default); the other
tests run once, on the default one (the C one where it is built), as does a test marked
`any_hot_path`: it launches, but what it checks (the files written after, the settings read
before) is the same code on either path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import (
    HOT_PATH_VARIABLE,
    Venv,
    build_extensions_in_place,
    build_wheel,
    exclusive,
    made_once,
    make_venv,
)
from support.cupti_stand_in import built_or_skip, stand_in_library
from support.nvtx_capture import InjectionUnavailable, build_injection_library

import kname
from kname import _warnings, callsite, hotpath, naming

# Test modules import helpers from one another across folders (test_startup from
# reliability/test_reliability): every folder of tests is on the path, whichever files are run.
_FOLDERS = [
    str(folder)
    for folder in sorted(Path(__file__).parent.iterdir())
    if folder.is_dir() and folder.name not in ("data", "support", "__pycache__")
]
sys.path.extend(folder for folder in _FOLDERS if folder not in sys.path)

HOT_PATHS = {"python": "0", "native": "1"}  # KNAME_NATIVE for each


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--hot-path", choices=[*HOT_PATHS, "both"], default="both",
        help="the per-launch wrapper(s) the tests marked `launches` run on (default: both)",
    )  # fmt: skip


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker more than the CPUs this process may run on. Many tests wait on a
    subprocess; the extra worker keeps the CPUs busy meanwhile (2 CPUs: 3:51 in place of 3:58)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cpus or 1) + 1


def pytest_sessionstart(session: pytest.Session) -> None:
    """Build kname's C extensions into the checkout (tests import kname from it), as
    `pip install` builds them into a wheel. pytest-xdist's workers start after the controller
    has built them, and leave the checkout alone."""
    if hasattr(session.config, "workerinput"):
        return
    problem = build_extensions_in_place()
    if problem:
        print(f"kname's extensions, built for the tests:\n{problem}", file=sys.stderr)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = metafunc.definition.get_closest_marker
    if marked("launches") and not marked("any_hot_path"):
        chosen = metafunc.config.getoption("hot_path")
        paths = list(HOT_PATHS) if chosen == "both" else [chosen]
        metafunc.parametrize("hot_path", paths, indirect=True)


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
    """The per-launch wrapper of this test: "python" or "native" for a test marked `launches`
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
def run_root(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this whole run: each pytest-xdist worker has its own inside it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(pytestconfig, "workerinput") else base


@pytest.fixture(autouse=True)
def one_gpu_test_at_a_time(request: pytest.FixtureRequest, run_root: Path):
    """The GPU tests share one GPU, and ncu or CUPTI on it: across pytest-xdist's workers, they
    run one at a time."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    with exclusive(run_root / "gpu.lock"):
        yield


@pytest.fixture(scope="session")
def kname_wheel(run_root: Path) -> Path:
    """kname's wheel, built from this checkout once per run."""
    return made_once(run_root / "wheel", build_wheel)


@pytest.fixture(scope="session")
def kname_venv(run_root: Path, kname_wheel: Path) -> Venv:
    """A fresh venv with kname's wheel installed, made once per run (shared: tests must not
    change it)."""

    def make(folder: Path) -> Path:
        made = make_venv(folder / "env")
        made.install(str(kname_wheel))
        return made.root

    return Venv(made_once(run_root / "venv", make))


@pytest.fixture(scope="module")
def fake_libcupti(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in libcupti (tests/support/fake_cupti.c), built for each test module: each
    module loads its own copy, with its own state. Skipped without the native callback or a C
    compiler."""
    return built_or_skip(tmp_path_factory.mktemp("fake_cupti"))


@pytest.fixture
def cupti(fake_libcupti: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The stand-in loaded (`library`, whose fake_* calls feed the recorder) and its `path`;
    kname's one-time messages said afresh."""
    monkeypatch.setattr(_warnings, "_said", set())
    return SimpleNamespace(library=stand_in_library(fake_libcupti), path=str(fake_libcupti))


@pytest.fixture
def venv_without_pth(tmp_path: Path, kname_wheel: Path) -> Venv:
    """A fresh venv with kname's wheel installed and its kname.pth removed (the sitecustomize
    gates' tests)."""
    venv = make_venv(tmp_path / "env")
    venv.install(str(kname_wheel))
    (venv.site_packages / "kname.pth").unlink()
    return venv
