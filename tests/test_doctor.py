"""`kname doctor`'s checks, run in this process (the installed command is in test_cli.py)."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import cleaned

from kname import doctor
from kname.config import KNOWN_VARIABLES


def doctor_lines(capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = doctor.main()
    return code, capsys.readouterr().out.splitlines()


def test_doctor_flags_a_misspelled_variable_with_the_nearest_name(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KNAME_MDOE", "census")
    code, lines = doctor_lines(capsys)
    assert code == 1
    assert "✗ KNAME_MDOE is not a kname variable (did you mean KNAME_MODE?); ignoring it" in lines


def test_doctor_flags_every_unknown_kname_variable(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KNAME_FOO", "1")  # like KNAME_FORMAT, but not a near miss
    monkeypatch.setenv("KNAME_OTHER_TOOL_LOG", "x")  # like nothing kname reads
    monkeypatch.setenv("_KNAME_REPORT_PID", "1")  # kname's own, internal
    _, lines = doctor_lines(capsys)
    flagged = [line for line in lines if "is not a kname variable" in line]
    assert flagged == [
        "✗ KNAME_FOO is not a kname variable; ignoring it (the nearest is KNAME_FORMAT)",
        "✗ KNAME_OTHER_TOOL_LOG is not a kname variable; ignoring it (kname reads "
        + ", ".join(KNOWN_VARIABLES)
        + ")",
    ]


def test_doctor_flags_no_variable_kname_reads(monkeypatch, capsys) -> None:
    for variable in KNOWN_VARIABLES:
        monkeypatch.setenv(variable, "")
    _, lines = doctor_lines(capsys)
    assert not [line for line in lines if "is not a kname variable" in line]


def settings_rows(lines: list[str]) -> list[str]:
    """The rows under "configuration in effect:" (each indented by four spaces)."""
    start = next(n for n, line in enumerate(lines) if line.endswith("configuration in effect:"))
    return [line for line in lines[start + 1 :] if line.startswith("    ")]


def test_the_settings_in_effect_list_every_variable_kname_reads_in_one_column(capsys) -> None:
    _, lines = doctor_lines(capsys)
    rows = settings_rows(lines)
    assert [row.split()[0] for row in rows] == list(KNOWN_VARIABLES)
    width = max(map(len, KNOWN_VARIABLES))
    assert all(row[4 + width] == " " and row[5 + width] != " " for row in rows), rows


def test_the_settings_in_effect_show_the_profile_outputs_and_switches(monkeypatch, capsys):
    for variable, value in {"KNAME_MODE": "profile", "KNAME_PROFILE_TOP": "7",
                            "KNAME_PROFILE_HTML": "p.html", "KNAME_PROFILE_TRACE": "t.json",
                            "KNAME_SOURCES": "0", "KNAME_DRIVER_HOOK": "0"}.items():  # fmt: skip
        monkeypatch.setenv(variable, value)
    _, lines = doctor_lines(capsys)
    shown = dict(row.split(None, 1) for row in settings_rows(lines))
    assert shown["KNAME_PROFILE_TOP"] == "7 call sites in the table"
    assert shown["KNAME_PROFILE_HTML"] == "p.html"
    assert shown["KNAME_PROFILE_TRACE"] == "t.json"
    assert shown["KNAME_SOURCES"] == "off"
    assert shown["KNAME_DRIVER_HOOK"] == "off"


# --- kname profile's needs ------------------------------------------------------------------


def driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def profiling_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line[2:].startswith("profiling: ")]


def test_the_profiling_lines_show_the_installed_versions(capsys) -> None:
    pytest.importorskip("cupti", reason="the CUPTI binding (cupti-python) is not installed")
    _, lines = doctor_lines(capsys)
    shown = profiling_lines(lines)
    assert shown[0] == f"✓ profiling: CUPTI binding cupti-python {version('cupti-python')}"
    try:
        library = f"nvidia-cuda-cupti {version('nvidia-cuda-cupti')}"
    except PackageNotFoundError:
        library = "nvidia-cuda-cupti is not installed"
    assert shown[1].startswith(f"– profiling: CUPTI library{':' * library.endswith('installed')} ")
    assert library in shown[1]
    if driver_loads():
        assert re.fullmatch(r"– profiling: CUDA driver for CUDA \d+\.\d+", shown[2])
    else:
        assert shown[2] == (
            "– profiling: no CUDA driver (libcuda.so.1 cannot be loaded): kname profile needs a GPU"
        )


def test_a_binding_that_does_not_import_is_said_in_one_line(monkeypatch, capsys) -> None:
    if doctor._version_or_none("cupti-python") is None:
        pytest.skip("cupti-python is not installed")
    monkeypatch.setitem(sys.modules, "cupti", None)  # what a broken install gives: ImportError
    _, lines = doctor_lines(capsys)
    (shown,) = profiling_lines(lines)
    assert shown.startswith(f"– profiling: cupti-python {version('cupti-python')} does not import")
    assert "(ModuleNotFoundError: import of cupti halted" in shown


@pytest.fixture
def installed_cupti(monkeypatch):
    """Set which versions installed metadata reports for the CUPTI binding and library (kname
    reads them from importlib.metadata, which it does not own); the binding itself is real."""
    pytest.importorskip("cupti", reason="the CUPTI binding (cupti-python) is not installed")
    from importlib import metadata

    real = metadata.version
    chosen: dict[str, str] = {}

    def version_of(distribution: str) -> str:
        return chosen[distribution] if distribution in chosen else real(distribution)

    monkeypatch.setattr(metadata, "version", version_of)
    return chosen


@pytest.mark.parametrize("mode", ["nvtx", "profile"])
def test_a_pair_of_two_releases_is_a_problem_in_every_mode(
    installed_cupti, monkeypatch, capsys, mode
) -> None:
    installed_cupti.update({"cupti-python": "13.0.1", "nvidia-cuda-cupti": "13.5.25"})
    monkeypatch.setattr(doctor, "_driver_version", lambda: None)  # the machine's, not kname's
    monkeypatch.setenv("KNAME_MODE", mode)
    code, lines = doctor_lines(capsys)
    (mismatch,) = [line for line in lines if "are of different CUDA releases" in line]
    assert code == 1
    assert mismatch == (
        "✗ profiling: cupti-python 13.0.1 and nvidia-cuda-cupti 13.5.25 are of different CUDA "
        "releases, so kname profile may record no GPU time, without any error: "
        "pip install 'nvidia-cuda-cupti==13.0.*'"
    )


def test_a_pair_of_one_release_is_not_flagged(installed_cupti, capsys) -> None:
    installed_cupti.update({"cupti-python": "13.0.1", "nvidia-cuda-cupti": "13.0.85"})
    _, lines = doctor_lines(capsys)
    assert not [line for line in lines if "are of different CUDA releases" in line]
    assert "– profiling: CUPTI library nvidia-cuda-cupti 13.0.85" in lines


@pytest.mark.parametrize(
    ("binding", "library", "differ"),
    [
        ("13.4.0", "13.0.85", True),  # the pair that recorded no kernels, silently
        ("13.0.1", "13.0.85", False),  # the pair the H200 fixture was recorded with
        ("12.9.0", "13.0.0", True),
        ("13.0.0rc1", "13.0.2", False),
        ("13.10.0", "13.1.0", True),  # numbers, not text
        ("13.0.1", "not installed", False),  # nothing to compare
        ("13", "13.0.1", False),
    ],
)
def test_releases_differ_by_major_and_minor(binding: str, library: str, differ: bool) -> None:
    assert doctor.releases_differ(binding, library) is differ


releases = st.tuples(st.integers(0, 99), st.integers(0, 99))
patches = st.from_regex(r"\A(\.\d{1,4}){0,2}(rc\d|\.post\d|\.dev\d)?\Z")


@given(releases, releases, patches, patches)
def test_two_versions_differ_exactly_when_their_major_minor_do(a, b, patch_a, patch_b) -> None:
    first, second = f"{a[0]}.{a[1]}{patch_a}", f"{b[0]}.{b[1]}{patch_b}"
    assert doctor.releases_differ(first, second) is (a != b)
    assert doctor.releases_differ(second, first) is (a != b)


# --- CUPTI advice: only pairs that can be installed -----------------------------------------


@pytest.mark.parametrize(
    ("binding", "library", "driver", "advised"),
    [
        # What pip gives for cupti-python 13.4 (no 13.5 binding is published): the library.
        ("13.4.0", "13.5.25", None, "'nvidia-cuda-cupti==13.4.*'"),
        ("13.0.1", "13.5.25", None, "'nvidia-cuda-cupti==13.0.*'"),
        # The driver runs CUDA 13.0 at most: both.
        ("13.4.0", "13.5.25", "13.0", "'cupti-python==13.0.*' 'nvidia-cuda-cupti==13.0.*'"),
        ("13.4.0", "13.0.85", None, "'cupti-python==13.0.*'"),  # the library's has a binding
        ("13.4.0", "13.0.85", "13.4", "'cupti-python==13.0.*'"),
    ],
)
def test_the_mismatch_advice_installs_what_differs_of_a_published_pair(
    installed_cupti, monkeypatch, capsys, binding, library, driver, advised
) -> None:
    installed_cupti.update({"cupti-python": binding, "nvidia-cuda-cupti": library})
    monkeypatch.setattr(doctor, "_driver_version", lambda: driver)  # the machine's, not kname's
    _, lines = doctor_lines(capsys)
    (mismatch,) = [line for line in lines if "are of different CUDA releases" in line]
    assert mismatch.endswith(f"without any error: pip install {advised}"), mismatch


def test_the_advice_for_a_missing_binding_is_a_published_pair(monkeypatch, capsys) -> None:
    monkeypatch.setattr(doctor, "_version_or_none", lambda d: "13.5.25" if "cuda" in d else None)
    monkeypatch.setitem(sys.modules, "cupti", None)  # no binding: ImportError
    monkeypatch.setattr(doctor, "_driver_version", lambda: None)
    _, lines = doctor_lines(capsys)
    assert profiling_lines(lines) == [
        "– profiling: the CUPTI binding is not installed; kname profile needs it: pip install "
        "'cupti-python==13.4.*' 'nvidia-cuda-cupti==13.4.*'"
    ]


cuda_releases = st.tuples(st.integers(11, 14), st.integers(0, 9))
published_releases = st.lists(cuda_releases, min_size=1, max_size=6, unique=True).map(tuple)
maybe = st.none() | cuda_releases


@given(maybe, maybe, maybe, published_releases)
def test_the_release_advised_is_always_a_published_one(binding, library, driver, published):
    assert doctor.cupti_release(binding, library, driver, published) in published


@given(maybe, maybe, cuda_releases, published_releases)
def test_the_release_advised_is_one_the_driver_runs_where_one_is(
    binding, library, driver, published
) -> None:
    advised = doctor.cupti_release(binding, library, driver, published)
    assert advised <= driver or all(release > driver for release in published)


@given(maybe, maybe, maybe, published_releases)
def test_the_installed_library_release_is_kept_else_the_binding_release(
    binding, library, driver, published
) -> None:
    advised = doctor.cupti_release(binding, library, driver, published)
    runnable = [r for r in published if driver is None or r <= driver] or list(published)
    if library in runnable:
        assert advised == library
    elif binding in runnable:
        assert advised == binding
    else:
        assert advised == max(runnable)


@functools.cache
def index_reachable() -> bool:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "cupti-python"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode == 0 and "Available versions" in done.stdout


@pytest.mark.parametrize("release", doctor.CUPTI_RELEASES, ids=lambda r: f"{r[0]}.{r[1]}")
def test_every_cupti_pair_doctor_advises_installs_from_the_index(release, tmp_path) -> None:
    if not index_reachable():
        pytest.skip("the package index cannot be reached from here")
    text = f"{release[0]}.{release[1]}"
    advice = doctor._cupti_advice(None, None, text)  # neither installed, a driver for `release`
    requirements = re.findall(r"'([^']+)'", advice)
    assert requirements == [f"cupti-python=={text}.*", f"nvidia-cuda-cupti=={text}.*"], advice
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), *requirements],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    chosen = {
        i["metadata"]["name"]: i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    for distribution in ("cupti-python", "nvidia-cuda-cupti"):
        assert chosen[distribution].startswith(f"{text}."), chosen


# --- --profile-check ------------------------------------------------------------------------


@pytest.mark.skipif(driver_loads(), reason="this machine has a CUDA driver")
def test_the_profile_check_without_a_gpu_is_one_line_and_no_problem(capsys) -> None:
    plain, without = doctor_lines(capsys)
    code = doctor.main(profile_check=True)
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert code == plain
    assert lines[: len(without)] == without  # the check adds its line after the others
    assert lines[len(without) :] == ["– profile check: no CUDA driver here, so no GPU: skipped"]
    assert captured.err == ""


@pytest.mark.skipif(driver_loads(), reason="this machine has a CUDA driver")
def test_kname_doctor_profile_check_without_a_gpu_exits_0(kname_venv, inject_lib) -> None:
    environment = {"KNAME": "1", "NVTX_INJECTION64_PATH": str(inject_lib)}
    done = kname_venv.python_run("-m", "kname", "doctor", "--profile-check", env=environment)
    # The venv sees this environment's CUPTI pair: one of two releases is rightly a ✗.
    assert done.returncode == int(doctor.installed_pair_differs()), done.stdout
    assert done.stderr == ""
    checked = [line for line in done.stdout.splitlines() if "profile check" in line]
    assert checked == ["– profile check: no CUDA driver here, so no GPU: skipped"]


# --- user targets: looked for where the program would look --------------------------------


@pytest.fixture
def app_directory(tmp_path, monkeypatch) -> Path:
    """An app's directory with a package of its own, `physics`, as the working directory; this
    process's sys.path without it (as the `kname` console script's is)."""
    (tmp_path / "physics").mkdir()
    (tmp_path / "physics" / "__init__.py").write_text(
        "raise RuntimeError('physics was imported')\n"
    )
    (tmp_path / "physics" / "launch.py").write_text("def launch_1d():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    here = {"", ".", str(tmp_path)}
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in here])
    return tmp_path


def target_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line[2:].startswith("target ")]


def test_a_project_local_target_is_found_in_the_current_directory(app_directory, monkeypatch,
                                                                  capsys) -> None:  # fmt: skip
    monkeypatch.setenv("KNAME_TARGETS", "physics.launch:launch_1d")
    _, lines = doctor_lines(capsys)
    assert target_lines(lines) == [
        f"✓ target physics.launch:launch_1d: physics.launch, found in the current directory "
        f"({app_directory / 'physics' / 'launch.py'}), as a program started here imports it"
    ]
    assert "physics" not in sys.modules


@pytest.mark.parametrize(
    ("entry", "hint"),
    [
        ("physic.launch:launch_1d", " (did you mean physics.launch:launch_1d?)"),
        ("physics.lanch:launch_1d", " (did you mean physics.launch:launch_1d?)"),
        ("nosuchmod:f", ""),
    ],
)
def test_a_target_that_cannot_be_imported_says_where_it_was_looked_for(
    app_directory, monkeypatch, capsys, entry, hint
) -> None:
    monkeypatch.setenv("KNAME_TARGETS", entry)
    code, lines = doctor_lines(capsys)
    module = entry.split(":")[0]
    assert code == 1
    assert target_lines(lines) == [
        f"✗ target {entry} (KNAME_TARGETS): no module {module!r} can be imported from the current "
        f"directory ({app_directory}) or this Python's sys.path{hint}"
    ]
    assert "physics" not in sys.modules


def test_the_kname_command_run_in_an_app_directory_finds_its_package(kname_venv, tmp_path):
    # The console script's sys.path starts with the venv's bin directory, not the working one.
    (tmp_path / "physics").mkdir()
    (tmp_path / "physics" / "__init__.py").write_text("")
    (tmp_path / "physics" / "launch.py").write_text("def launch_1d():\n    pass\n")
    environ = {k: v for k, v in os.environ.items() if not cleaned(k) and k != "PYTHONPATH"}
    environ["KNAME_TARGETS"] = "physics.launch:launch_1d"
    done = subprocess.run([str(kname_venv.root / "bin" / "kname"), "doctor"], capture_output=True,
                          text=True, env=environ, cwd=tmp_path, check=False)  # fmt: skip
    (line,) = target_lines(done.stdout.splitlines())
    assert line.startswith("✓ target physics.launch:launch_1d: physics.launch, found in"), line
