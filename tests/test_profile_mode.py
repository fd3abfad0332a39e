"""KNAME_MODE=profile and `kname.profile()`: configuration, start-up, and the outputs at exit.

CUPTI needs a GPU, so where a test needs GPU records a scripted stand-in takes the CUPTI
collector's place (`kname.profiling.cupti_collector.CuptiCollector`, which the session looks up
when it is made): it calls the session's capture from inside a real launch call, with the real
frame, as CUPTI's callback does, and hands over the GPU record the launch would cause.
Everything else is the real thing: the config, install(), kname's launch wrapper and the
outputs, in a subprocess where the program's exit matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from html import escape
from pathlib import Path

import pytest
from support import REPO, line_of

import kname
from kname import _warnings
from kname.census_file import OWNER_VARIABLE
from kname.config import DEFAULT_TOP, MODES, read_config
from kname.profiling import document as profile_document
from kname.profiling import mode

NOT_COLLECTED = "GPU times are not collected in this run; launches are still named"


def profile_config(**variables: str):
    return read_config({"KNAME_MODE": "profile", **variables})


# --- configuration --------------------------------------------------------------------------


def test_profile_is_a_mode() -> None:
    assert "profile" in MODES
    config = profile_config()
    assert (config.mode, config.trace, config.html, config.top) == ("profile", None, None, 20)
    assert config.problems == ()


def test_the_profile_outputs_are_read_in_profile_mode() -> None:
    config = profile_config(
        KNAME_REPORT="p.json", KNAME_PROFILE_TRACE="t.json", KNAME_PROFILE_HTML=" p.html ",
        KNAME_PROFILE_TOP="5",
    )  # fmt: skip
    assert (config.report, config.trace, config.html, config.top) == (
        "p.json", "t.json", "p.html", 5,
    )  # fmt: skip
    assert config.problems == ()


@pytest.mark.parametrize("value", ["0", "-3", "ten", "2.5", "1" * 5000])
def test_a_bad_top_is_one_line_naming_it_and_the_default_is_used(value: str) -> None:
    config = profile_config(KNAME_PROFILE_TOP=value)
    (problem,) = config.problems
    assert problem.startswith(f"KNAME_PROFILE_TOP={value!r}"[:60])
    assert "whole number of 1 or more" in problem and "\n" not in problem
    assert config.top == DEFAULT_TOP


@pytest.mark.parametrize("variable", ["KNAME_PROFILE_TRACE", "KNAME_PROFILE_HTML"])
def test_a_profile_output_outside_profile_mode_is_one_line_and_ignored(variable: str) -> None:
    config = read_config({"KNAME_MODE": "census", variable: "out.json"})
    (problem,) = config.problems
    assert problem == (
        f"{variable}='out.json' is only read with KNAME_MODE=profile (KNAME_MODE is census); "
        "ignoring it"
    )
    assert config.trace is None and config.html is None


# --- install() in profile mode, where CUPTI cannot start --------------------------------------


def test_without_cupti_install_says_so_once_and_launches_are_still_named(
    monkeypatch, tmp_path, capsys
) -> None:
    monkeypatch.setattr(_warnings, "_said", set())
    monkeypatch.setitem(sys.modules, "cupti", None)  # as where cupti-python is not installed
    monkeypatch.setenv("KNAME_MODE", "profile")
    monkeypatch.setenv("KNAME_REPORT", str(tmp_path / "p.json"))
    (tmp_path / "gpulib.py").write_text("def launch(*args):\n    return args\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kname.install(targets=["gpulib:launch"])
    import gpulib

    gpulib.launch(1)  # the launch line
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith(NOT_COLLECTED), lines
    assert "pip install 'kname[profile]'" in lines[0]
    assert list(kname.names().values()) == [1]
    assert mode._session is None or not mode._session.collecting


# --- the whole mode, with a scripted CUPTI, in a real process -----------------------------------

FAKE_LIBRARY = '''
"""A GPU library whose launch calls the CUDA API from Python (as numba's dispatcher does)."""
from scripted import cuda_launch


def launch(kernel, gpu_ns):
    return enqueue(kernel, gpu_ns)


def enqueue(kernel, gpu_ns):
    return cuda_launch(kernel, gpu_ns)
'''

SCRIPTED = '''
"""Stands in for the CUPTI collector: the callback at each CUDA launch call, and its record."""
import sys

from kname.profiling import cupti_collector
from kname.profiling.records import ActivityRecord

COLLECTOR = None


class ScriptedCupti:
    def __init__(self, capture, join, log):
        global COLLECTOR
        self.capture, self.join, self.log = capture, join, log
        self.started, self.next_id, self.externals = False, 0, []
        COLLECTOR = self

    def start(self):
        self.started = True
        return True

    def stop(self):
        self.started = False


def cuda_launch(kernel, gpu_ns):
    """What CUPTI does at a launch API call: its callback sees the calling Python frame."""
    collector = COLLECTOR
    collector.next_id += 1
    number = collector.next_id
    collector.capture.enter(sys._getframe(1), number, "cuLaunchKernel", False, 1000 * number)
    collector.capture.exit(number, 1000 * number + 200)
    begin = 1000 * number + 300
    record = ActivityRecord("kernel", number, kernel, begin, begin + gpu_ns)
    collector.join.add_activities([record])
    if collector.log is not None:
        collector.log.add_activities([record])


cupti_collector.CuptiCollector = ScriptedCupti
'''

PROGRAM = """
import sys
import scripted  # before kname starts: the session it makes takes the scripted collector
import kname
kname.install()
import fakelib

for _ in range(3):
    fakelib.launch("axpy", 2_000)  # L:wrapped
scripted.cuda_launch("_Z9scale_rawPfi", 9_000)  # L:direct
{ending}
"""


def run_program(tmp_path, env: dict[str, str], ending: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "scripted.py").write_text(textwrap.dedent(SCRIPTED))
    (tmp_path / "fakelib.py").write_text(textwrap.dedent(FAKE_LIBRARY))
    (tmp_path / "app.py").write_text(PROGRAM.format(ending=ending))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    environ.pop(OWNER_VARIABLE, None)
    environ.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", KNAME_MODE="profile")
    environ.update(KNAME_TARGETS="fakelib:launch", KNAME_SKIP="scripted,fakelib", **env)
    return subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, env=environ, capture_output=True, text=True
    )


def app_line(marker: str) -> int:
    return line_of(PROGRAM, marker)


@pytest.mark.parametrize(
    ("ending", "code"), [("", 0), ("sys.exit(4)", 4), ("raise RuntimeError('the app failed')", 1)]
)
def test_profile_mode_prints_the_table_and_writes_every_output_at_exit(
    tmp_path, ending, code
) -> None:
    done = run_program(
        tmp_path,
        {"KNAME_REPORT": "p.json", "KNAME_PROFILE_TRACE": "t.json", "KNAME_PROFILE_HTML": "p.html"},
        ending,
    )
    assert done.returncode == code, done.stderr
    wrapped = f"<module> app.py:{app_line('L:wrapped')}"
    direct = f"<module> app.py:{app_line('L:direct')}"
    assert "kname profile: 15.0 us of GPU time in 4 launches from 2 call sites" in done.stderr
    saved = profile_document.load(str(tmp_path / "p.json"))
    assert [(s["name"], s["launches"], s["gpu_ns"]) for s in saved["sites"]] == [
        (direct, 1, 9_000),
        (wrapped, 3, 6_000),
    ]
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert f"{wrapped} / axpy" in names and f"{direct} / scale_raw" in names
    assert f'data-site="{escape(wrapped)}"' in (tmp_path / "p.html").read_text()


def test_the_table_shows_the_top_call_sites(tmp_path) -> None:
    done = run_program(tmp_path, {"KNAME_PROFILE_TOP": "1"})
    assert done.returncode == 0, done.stderr
    assert f"<module> app.py:{app_line('L:direct')}" in done.stderr
    assert f"<module> app.py:{app_line('L:wrapped')}" not in done.stderr
    assert "... and 1 more call site: 6.00 us (40.0%)" in done.stderr


def test_no_launch_census_is_written_in_profile_mode(tmp_path) -> None:
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json"})
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "p.json").read_text())["schema"] == 2
    assert "kname census" not in done.stderr


def test_a_process_beneath_the_owner_writes_files_of_its_own_and_no_table(tmp_path) -> None:
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json", OWNER_VARIABLE: "1"})
    assert done.returncode == 0, done.stderr
    (written,) = tmp_path.glob("p.pid*.json")
    assert profile_document.load(str(written))["total_gpu_ns"] == 15_000
    assert not (tmp_path / "p.json").exists()
    assert "kname profile:" not in done.stderr


def test_beside_puts_the_pid_before_the_suffix() -> None:
    pid = os.getpid()
    assert mode.beside("out/p.json") == f"out/p.pid{pid}.json"
    assert mode.beside("trace") == f"trace.pid{pid}.json"


# --- kname.profile() ------------------------------------------------------------------------


@pytest.fixture
def scripted(tmp_path, monkeypatch):
    """The scripted CUPTI above, importable, in place of the collector until the test ends."""
    from kname.profiling import cupti_collector

    monkeypatch.setattr(cupti_collector, "CuptiCollector", cupti_collector.CuptiCollector)
    (tmp_path / "scripted.py").write_text(textwrap.dedent(SCRIPTED))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "scripted", raising=False)
    import scripted

    yield scripted
    sys.modules.pop("scripted", None)


def test_kname_profile_profiles_a_block_and_installs_kname(scripted, tmp_path) -> None:
    with kname.profile() as profile:
        assert profile.collecting
        scripted.cuda_launch("axpy", 2_000)  # L:block
    assert not profile.collecting and kname.is_installed()
    line = line_of(Path(__file__).read_text(), "L:" + "block")  # not this line itself
    here = f"test_kname_profile_profiles_a_block_and_installs_kname test_profile_mode.py:{line}"
    assert [(s["name"], s["launches"], s["gpu_ns"]) for s in profile.sites] == [(here, 1, 2_000)]
    assert profile.table().startswith("kname profile: 2.00 us of GPU time in 1 launch from 1 ")
    profile.save(tmp_path / "p.json")
    assert profile_document.load(str(tmp_path / "p.json")) == profile.document()


def test_one_session_collects_at_a_time(scripted, capsys, monkeypatch) -> None:
    monkeypatch.setattr(_warnings, "_said", set())
    with kname.profile() as first, kname.profile() as second:
        assert first.collecting and not second.collecting
    (line,) = capsys.readouterr().err.splitlines()
    assert "another kname profile session is collecting in this process" in line
    with kname.profile() as third:  # the first one stopped: CUPTI is free again
        assert third.collecting


def test_kname_profile_without_cupti_runs_the_block(monkeypatch, capsys) -> None:
    monkeypatch.setattr(_warnings, "_said", set())
    monkeypatch.setitem(sys.modules, "cupti", None)
    ran = False
    with kname.profile() as profile:
        ran = True
    assert ran and not profile.collecting
    assert profile.table() == "kname profile: 0 ns of GPU time in 0 launches from 0 call sites\n"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(NOT_COLLECTED)
