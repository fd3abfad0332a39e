"""KNAME_MODE=profile and `kname.profile()`: configuration, start-up, and the outputs at exit.

CUPTI needs a GPU, so where a test needs GPU records a scripted stand-in takes the CUPTI
collector's place (`kname.profiling.cupti_collector.CuptiCollector`, which the session looks up
when it is made): it calls the session's capture from inside a real launch call, with the real
frame, as CUPTI's callback does, and hands over the GPU record the launch would cause.
Everything else is the real thing: the config, install(), kname's launch wrapper and the
outputs, in a subprocess where the program's exit matters.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from html import escape
from pathlib import Path
from typing import NamedTuple

import pytest
from support import REPO, cleaned, ended_by_sigterm, line_of

import kname
from kname import _warnings
from kname.config import DEFAULT_TOP, MODES, read_config
from kname.documents.files import load
from kname.documents.owner import OWNER_PATHS_VARIABLE, OWNER_VARIABLE
from kname.profiling import mode

pytestmark = pytest.mark.launches

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


def launch(kernel, gpu_ns, seen=True):
    return enqueue(kernel, gpu_ns, seen)


def enqueue(kernel, gpu_ns, seen):
    return cuda_launch(kernel, gpu_ns, seen)  # L:enqueue
'''

SCRIPTED = '''
"""Stands in for the CUPTI collector: the callback at each CUDA launch call, and its record."""
import sys

from kname.profiling import cupti_collector
from kname.profiling.records import ActivityRecord, ExternalCorrelation

COLLECTOR = None


class ScriptedCupti:
    def __init__(self, capture, join, log):
        global COLLECTOR
        self.capture, self.join, self.log = capture, join, log
        self.started, self.next_id, self.tags = False, 0, []  # tags: the external id stack
        COLLECTOR = self

    def start(self):
        self.started = True
        return True

    def stop(self):
        self.started = False

    def external_calls(self):
        return self.tags.append, self.tags.pop


def cuda_launch(kernel, gpu_ns, seen=True):
    """What CUPTI does at a launch API call: its callback sees the calling Python frame (not
    when `seen` is false: an API no callback is enabled for), and CUPTI links the call to the
    external id pushed on this thread, if any, in a record that arrives after the kernel's."""
    collector = COLLECTOR
    if collector is None or not collector.started:
        return  # CUPTI calls back only while kname is subscribed
    collector.next_id += 1
    number = collector.next_id
    if seen:
        collector.capture.enter(sys._getframe(1), number, "cuLaunchKernel", False, 1000 * number)
        collector.capture.exit(number, 1000 * number + 200)
    begin = 1000 * number + 300
    record = ActivityRecord("kernel", number, kernel, begin, begin + gpu_ns)
    collector.join.add_activities([record])
    links = [ExternalCorrelation(number, collector.tags[-1])] if collector.tags else []
    collector.join.add_externals(links)
    if collector.log is not None:
        collector.log.add_activities([record])
        collector.log.add_externals(links)


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


def write_program(tmp_path, env: dict[str, str], ending: str = "") -> dict[str, str]:
    """app.py and its modules in `tmp_path`; the environment that runs it in profile mode."""
    (tmp_path / "scripted.py").write_text(textwrap.dedent(SCRIPTED))
    (tmp_path / "fakelib.py").write_text(textwrap.dedent(FAKE_LIBRARY))
    (tmp_path / "app.py").write_text(PROGRAM.format(ending=ending))
    environ = {k: v for k, v in os.environ.items() if not cleaned(k, ("KNAME",))}
    environ.pop(OWNER_VARIABLE, None)
    environ.update(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}", KNAME_MODE="profile")
    environ.update({"KNAME_TARGETS": "fakelib:launch", "KNAME_SKIP": "scripted,fakelib", **env})
    return environ


def beneath(*paths) -> dict[str, str]:
    """The mark a process inherits from an owner (pid 1) of `paths`."""
    return {OWNER_VARIABLE: "1", OWNER_PATHS_VARIABLE: json.dumps([str(path) for path in paths])}


class Finished(NamedTuple):
    """A program run to its end: its pid (which its table at exit names) and what it gave."""

    pid: int
    returncode: int
    stdout: str
    stderr: str


def run_program(tmp_path, env: dict[str, str], ending: str = "") -> Finished:
    environ = write_program(tmp_path, env, ending)
    with subprocess.Popen(
        [sys.executable, "app.py"], cwd=tmp_path, env=environ, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as program:  # fmt: skip
        stdout, stderr = program.communicate(timeout=120)
    return Finished(program.pid, program.returncode, stdout, stderr)


def exit_heading(pid: int, rest: str, rank: str = "") -> str:
    """The heading of the table printed at exit: the process (and its rank), then `rest`."""
    return f"kname profile of process {pid}{rank}: {rest}"


TOTALS = "15.0 us of GPU time in 4 launches from 2 call sites"  # what PROGRAM's launches make


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
    saved = load(str(tmp_path / "p.json"))
    assert saved["ranks"][0]["pid"] == done.pid
    assert exit_heading(done.pid, TOTALS) in done.stderr.splitlines()
    assert [(s["name"], s["launches"], s["gpu_ns"]) for s in saved["sites"]] == [
        (direct, 1, 9_000),
        (wrapped, 3, 6_000),
    ]
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert f"{wrapped} / axpy" in names and f"{direct} / scale_raw" in names
    assert f'data-site="{escape(wrapped)}"' in (tmp_path / "p.html").read_text()


def written_in(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name != "__pycache__")


def test_one_file_for_two_outputs_keeps_the_first_and_says_which_is_not_written(tmp_path) -> None:
    """--json, --trace and --html on one path left only the page, silently."""
    same = {
        "KNAME_REPORT": "p.json",
        "KNAME_PROFILE_TRACE": "p.json",
        "KNAME_PROFILE_HTML": "p.json",
    }
    done = run_program(tmp_path, same)
    assert done.returncode == 0, done.stderr
    assert load(str(tmp_path / "p.json"))["total_gpu_ns"] == 15_000  # the profile, as --json said
    said = [line for line in done.stderr.splitlines() if "one file holds one output" in line]
    assert said == [
        f"kname: {variable} ({option}) names the file KNAME_REPORT (--json) names, "
        f"{tmp_path / 'p.json'}; one file holds one output: the {what} is not written"
        for variable, option, what in (
            ("KNAME_PROFILE_TRACE", "--trace", "trace"), ("KNAME_PROFILE_HTML", "--html", "page")
        )
    ]  # fmt: skip
    assert written_in(tmp_path) == ["app.py", "fakelib.py", "p.json", "scripted.py"]


def test_the_host_folder_of_the_multi_node_recipe_is_made(tmp_path) -> None:
    """The README's `--json 'prof/{host}/profile.json'`: each rank's file, not one line each
    saying that the folder does not exist."""
    (tmp_path / "prof").mkdir()
    done = run_program(
        tmp_path, {"KNAME_REPORT": "prof/{host}/p.json", "KNAME_PROFILE_HTML": "prof/{host}/p.html"}
    )
    assert done.returncode == 0, done.stderr
    host = tmp_path / "prof" / socket.gethostname()
    assert sorted(os.listdir(host)) == ["p.html", "p.json"]
    assert load(str(host / "p.json"))["total_gpu_ns"] == 15_000


def test_a_dash_is_the_table_on_stderr_and_no_trace_or_page(tmp_path) -> None:
    """`-` for KNAME_REPORT is the table on stderr, no file; a trace or a page has no table: `-`
    is refused in one line, never a file named `-`."""
    done = run_program(
        tmp_path, {"KNAME_REPORT": "-", "KNAME_PROFILE_TRACE": "-", "KNAME_PROFILE_HTML": "-"}
    )
    assert done.returncode == 0, done.stderr
    assert exit_heading(done.pid, TOTALS) in done.stderr.splitlines()
    for variable in ("KNAME_PROFILE_TRACE", "KNAME_PROFILE_HTML"):
        assert (
            f"kname: {variable}='-': only KNAME_REPORT takes - (the table on stderr); a trace or "
            "a page is a file: name one, or /dev/stdout; nothing is written"
        ) in done.stderr.splitlines()
    assert written_in(tmp_path) == ["app.py", "fakelib.py", "scripted.py"]


def test_a_profile_run_ended_by_sigterm_writes_its_outputs_and_dies_of_it(tmp_path) -> None:
    import signal

    ending = 'import time\nprint("ready", flush=True)\ntime.sleep(60)'
    environ = write_program(
        tmp_path, {"KNAME_REPORT": "p.json", "KNAME_PROFILE_HTML": "p.html"}, ending
    )
    code, stderr = ended_by_sigterm([sys.executable, "app.py"], tmp_path, environ)
    assert code == -signal.SIGTERM, stderr
    saved = load(str(tmp_path / "p.json"))
    assert exit_heading(saved["ranks"][0]["pid"], TOTALS) in stderr.splitlines()
    assert saved["total_gpu_ns"] == 15_000 and saved["total_launches"] == 4
    assert (tmp_path / "p.html").read_text().startswith("<!DOCTYPE html>")


TOGETHER = """
import os, time
# Both runs last until both have started: they overlap, as a job's ranks do.
open(f"started.{os.getpid()}", "w").close()
deadline = time.monotonic() + 60
while sum(n.startswith("started.") for n in os.listdir(".")) < 2:
    if time.monotonic() > deadline:
        break
    time.sleep(0.01)
"""


def test_profile_runs_started_apart_that_share_their_outputs_lose_none(tmp_path) -> None:
    environ = write_program(
        tmp_path, {"KNAME_REPORT": "p.json", "KNAME_PROFILE_HTML": "p.html"}, TOGETHER
    )
    command = [sys.executable, "app.py"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    programs = [subprocess.Popen(command, cwd=tmp_path, env=environ, **pipes) for _ in range(2)]
    said = {}
    for program in programs:
        _, stderr = program.communicate(timeout=120)
        assert program.returncode == 0, stderr
        said[program.pid] = [line for line in stderr.splitlines() if "another process" in line]
    (later,) = [pid for pid, lines in said.items() if lines]
    assert said[later] == [
        f"kname: another process wrote {tmp_path / 'p.json'} while this one ran; this process's "
        f"profile (KNAME_REPORT) is in {tmp_path / f'p.pid{later}.json'} instead",
        f"kname: another process wrote {tmp_path / 'p.html'} while this one ran; this process's "
        f"page (KNAME_PROFILE_HTML) is in {tmp_path / f'p.pid{later}.html'} instead",
    ]
    for name in ("p.json", f"p.pid{later}.json"):
        assert load(str(tmp_path / name))["total_launches"] == 4
    assert (tmp_path / f"p.pid{later}.html").read_text().startswith("<!DOCTYPE html>")


def test_the_table_shows_the_top_call_sites(tmp_path) -> None:
    done = run_program(tmp_path, {"KNAME_PROFILE_TOP": "1"})
    assert done.returncode == 0, done.stderr
    assert f"<module> app.py:{app_line('L:direct')}" in done.stderr
    assert f"<module> app.py:{app_line('L:wrapped')}" not in done.stderr
    assert "... and 1 more call site: 6.00 us (40.0%)" in done.stderr


def test_kname_profile_trace_max_caps_the_trace_file_which_stays_valid_json(tmp_path) -> None:
    timed = {}
    for cap in ("", "3"):
        done = run_program(
            tmp_path, {"KNAME_PROFILE_TRACE": f"t{cap}.json", "KNAME_PROFILE_TRACE_MAX": cap}
        )
        assert done.returncode == 0, done.stderr
        events = json.loads((tmp_path / f"t{cap}.json").read_text())["traceEvents"]
        timed[cap] = len([e for e in events if e["ph"] == "X"])
    # Three records: launch calls, GPU records and the wrapped launches' external correlations.
    assert 0 < timed["3"] <= 3 < timed[""]
    (said,) = [line for line in done.stderr.splitlines() if "the trace keeps" in line]
    assert said.startswith("kname: profile: the trace keeps at most 3 records (")
    assert "KNAME_PROFILE_TRACE_MAX" in said


def test_no_launch_census_is_written_in_profile_mode(tmp_path) -> None:
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json"})
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "p.json").read_text())["schema"] == 2
    assert "kname census" not in done.stderr


def test_a_process_beneath_the_owner_writes_files_of_its_own_and_no_table(tmp_path) -> None:
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json", **beneath(tmp_path / "p.json")})
    assert done.returncode == 0, done.stderr
    (written,) = tmp_path.glob("p.pid*.json")
    assert load(str(written))["total_gpu_ns"] == 15_000
    assert not (tmp_path / "p.json").exists()
    assert "kname profile" not in done.stderr


def test_a_process_beneath_the_owner_that_launched_nothing_leaves_no_file(tmp_path) -> None:
    """A compile worker or a DataLoader worker: no profile file, no page, no table; the owner
    writes its profile even when empty."""
    environ = write_program(tmp_path, {"KNAME_REPORT": "p.json", "KNAME_PROFILE_HTML": "p.html"})
    (tmp_path / "helper.py").write_text("import scripted\nimport kname\nkname.install()\n")
    run = functools.partial(
        subprocess.run, [sys.executable, "helper.py"], cwd=tmp_path, capture_output=True, text=True
    )
    done = run(env={**environ, **beneath(tmp_path / "p.json", tmp_path / "p.html")})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("p*")) == [] and done.stderr == ""
    done = run(env=environ)
    assert done.returncode == 0, done.stderr
    saved = load(str(tmp_path / "p.json"))
    assert saved["total_launches"] == 0
    heading = exit_heading(
        saved["ranks"][0]["pid"], "0 ns of GPU time in 0 launches from 0 call sites"
    )
    assert heading in done.stderr.splitlines()


CHILDREN = """
import multiprocessing, os, subprocess, sys
import scripted  # before kname starts, in each child too: its session takes the stand-in
import kname
kname.install()


def work(launches):
    for _ in range(launches):
        scripted.cuda_launch("axpy", 1_000)


if __name__ == "__main__":
    if sys.argv[1:] == ["again"]:  # the subprocess
        work(4)
        sys.exit()
    for launches in (2, 3):  # two spawned workers, one after the other
        child = multiprocessing.get_context("spawn").Process(target=work, args=(launches,))
        child.start()
        child.join()
        print(child.pid, launches)
    with subprocess.Popen([sys.executable, "children.py", "again"]) as child:
        pass
    print(child.pid, 4)
    work(1)
    print(os.getpid(), 1)
"""


# A lone program, and rank 1 of a Slurm step of 2 (its children are rank 1 too).
@pytest.mark.parametrize(
    ("job", "rank"),
    [({}, ""), ({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}, " (rank 1 of 2)")],
)
def test_each_table_at_exit_names_its_own_process_among_a_programs_children(
    tmp_path, job, rank
) -> None:
    """KNAME_REPORT=- in a program with children (two spawned workers, a subprocess): a table
    per process on one stderr, each heading naming that process's pid (and its rank)."""
    environ = write_program(tmp_path, {"KNAME_REPORT": "-", **job})
    (tmp_path / "children.py").write_text(CHILDREN)
    done = subprocess.run(
        [sys.executable, "children.py"], cwd=tmp_path, env=environ, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    launched = {int(pid): int(n) for pid, n in (line.split() for line in done.stdout.splitlines())}
    assert len(launched) == 4 and set(launched.values()) == {1, 2, 3, 4}
    headings = [line for line in done.stderr.splitlines() if line.startswith("kname profile")]
    assert sorted(headings) == sorted(
        exit_heading(pid, f"{n}.00 us of GPU time in {n} launch{'es' * (n > 1)} from 1 call site",
                     rank)
        for pid, n in launched.items()
    )  # fmt: skip


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
    here = f"test_kname_profile_profiles_a_block_and_installs_kname test_profiling_mode.py:{line}"
    assert [(s["name"], s["launches"], s["gpu_ns"]) for s in profile.sites] == [(here, 1, 2_000)]
    assert profile.table().startswith("kname profile: 2.00 us of GPU time in 1 launch from 1 ")
    profile.save(tmp_path / "p.json")
    assert load(str(tmp_path / "p.json")) == profile.document()


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
    # Why, not a table of 0 launches (issue 46).
    assert profile.table().startswith(
        "kname profile: no GPU time was collected (the CUPTI binding cannot be imported: "
    )
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(NOT_COLLECTED)


# --- the hand-over from kname's launch wrapper -------------------------------------------------


@pytest.fixture
def fakelib(scripted, tmp_path, monkeypatch):
    """The GPU library above, imported fresh and wrapped by kname (not in KNAME_SKIP)."""
    (tmp_path / "fakelib.py").write_text(textwrap.dedent(FAKE_LIBRARY))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    monkeypatch.setenv("KNAME_SKIP", "scripted")
    kname.install(targets=["fakelib:launch"])
    import fakelib

    yield fakelib
    sys.modules.pop("fakelib", None)


def test_a_wrapped_launch_hands_its_site_to_the_launch_calls_inside(fakelib) -> None:
    # Without the hand-over the callback, walking from fakelib.enqueue's frame, would take
    # that line (fakelib is not library code here) for the call site.
    with kname.profile() as profile:
        for _ in range(2):
            fakelib.launch("axpy", 1_000)  # L:handed
    here = f"{__name__.rpartition('.')[2]}.py"
    line = line_of(Path(__file__).read_text(), "L:" + "handed")
    name = f"test_a_wrapped_launch_hands_its_site_to_the_launch_calls_inside {here}:{line}"
    assert [(s["name"], s["launches"]) for s in profile.sites] == [(name, 2)]
    assert kname.names() == {name: 2}  # the same name for the same launches


def test_a_launch_call_no_callback_saw_finds_its_site_by_external_correlation(fakelib) -> None:
    with kname.profile(keep_streams=True) as profile:
        fakelib.launch("axpy", 1_000, seen=False)  # L:unseen-1
        fakelib.launch("axpy", 3_000, seen=False)  # L:unseen-2
    lines = [line_of(Path(__file__).read_text(), "L:" + m) for m in ("unseen-1", "unseen-2")]
    assert [(s["name"].rpartition(":")[2], s["gpu_ns"]) for s in profile.sites] == [
        (str(lines[1]), 3_000),
        (str(lines[0]), 1_000),
    ]
    assert profile.document()["unattributed"]["launches"] == 0
    streams = profile.streams()
    assert sorted(streams.external_sites.values()) == sorted(s["name"] for s in profile.sites)
    assert [link.correlation_id for link in streams.externals] == [1, 2]


def test_only_a_collecting_session_changes_what_a_wrapped_launch_does(fakelib) -> None:
    from kname import callsite

    def site_of_the_launch():
        (site,) = [s for s in callsite.sites.values() if s.lib == "fakelib" and s.launches()]
        return site

    with kname.profile():
        fakelib.launch("axpy", 1_000)
        during = site_of_the_launch()
        assert during.push is not None and during.pop is not None  # the hand-over
    fakelib.launch("axpy", 1_000)
    after = site_of_the_launch()
    assert after is not during  # every site was built anew when the session stopped
    assert after.push is None and after.pop is None  # no NVTX tool here: nothing to push


def test_under_an_nvtx_tool_each_wrapped_launch_keeps_its_range(tmp_path, inject_lib) -> None:
    from support.nvtx_capture import capture_env, read_capture

    log = tmp_path / "nvtx.log"
    done = run_program(tmp_path, {**capture_env(inject_lib, log), "KNAME_SKIP": "scripted"})
    assert done.returncode == 0, done.stderr
    wrapped = f"<module> app.py:{app_line('L:wrapped')}"
    assert f"{wrapped}  " in done.stderr  # the hand-over named the GPU time after the line
    captured = read_capture(log)
    assert captured.ranges("kname") == [wrapped] * 3 and captured.balanced()


def test_a_forked_child_launches_as_if_nothing_were_profiling(fakelib) -> None:
    from kname import callsite

    with kname.profile() as profile:
        fakelib.launch("axpy", 1_000)
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no session collects, its sites are plain ones
            handed_over = [s for s in callsite.sites.values() if s.lib == "fakelib"]
            plain = callsite._rules.site_calls is None and not handed_over
            os.write(writer, b"plain" if plain else b"not")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(reader, 16) == b"plain"
        assert profile.collecting  # the parent goes on collecting


def test_the_kname_command_started_in_profile_mode_leaves_the_users_profile_alone(
    tmp_path,
) -> None:
    """KNAME=1 KNAME_MODE=profile KNAME_REPORT=p.json left in the shell: the `kname` command
    itself starts a session too; `kname report p.json` must not rewrite p.json at its exit."""
    run_program(tmp_path, {"KNAME_REPORT": "p.json"})
    before = (tmp_path / "p.json").read_bytes()
    assert b'"gpu_ns"' in before
    command = (
        "import sys, scripted, kname; kname.install()\n"
        "from kname import cli\n"
        "assert sys.modules['kname.profiling.mode']._session is not None  # it did start\n"
        "sys.exit(cli.main(['report', 'p.json']))\n"
    )
    environ = write_program(tmp_path, {"KNAME_REPORT": "p.json"})
    done = subprocess.run(
        [sys.executable, "-c", command], cwd=tmp_path, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "15.0 us" in done.stdout  # the report of the user's profile
    assert "kname profile" not in done.stderr  # no table of the command's own
    assert (tmp_path / "p.json").read_bytes() == before


# --- long jobs: the flush, and a window of the run (issue 30) ---------------------------------

STUCK = """
import signal, time
signal.signal(signal.SIGTERM, lambda *_: None)  # a shutdown that never comes: SIGKILL will
print("ready", flush=True)
time.sleep(120)
"""


def start_program(tmp_path, env: dict[str, str], ending: str) -> subprocess.Popen:
    environ = write_program(tmp_path, env, ending)
    return subprocess.Popen(
        [sys.executable, "app.py"], cwd=tmp_path, env=environ, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def wait_for(check, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.05)


def launches_in(path: Path) -> int | None:
    """The launches of the profile at `path`, or None while there is none."""
    return load(str(path))["total_launches"] if path.exists() else None


# A lone process, and rank 1 of a Slurm step of 2 (its own files: p.rank1.json, p.rank1.html).
@pytest.mark.parametrize(
    ("rank", "suffix"), [({}, ""), ({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}, ".rank1")]
)
def test_a_job_killed_after_sigterm_leaves_the_profile_of_its_last_flush(
    tmp_path, rank, suffix
) -> None:
    outputs = {"KNAME_REPORT": "p.json", "KNAME_PROFILE_HTML": "p.html", **rank}
    program = start_program(tmp_path, {**outputs, "KNAME_PROFILE_FLUSH": "0.1"}, STUCK)
    with program:
        assert program.stdout.readline() == "ready\n"
        wait_for(lambda: launches_in(tmp_path / f"p{suffix}.json") == 4)
        # A scheduler's time limit: SIGTERM, a grace period, then SIGKILL.
        program.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert program.poll() is None  # the program's own handler ignored it
        program.kill()
        program.communicate(timeout=60)
    assert program.returncode == -signal.SIGKILL
    saved = load(str(tmp_path / f"p{suffix}.json"))  # whole, and valid
    assert (saved["total_launches"], saved["total_gpu_ns"]) == (4, 15_000)
    assert saved["ranks"][0]["pid"] == program.pid
    assert saved["ranks"][0]["rank"] == (1 if suffix else 0)
    assert (tmp_path / f"p{suffix}.html").read_text().endswith("</body></html>\n")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


ENDLESS = """
import time
print("ready", flush=True)
while True:
    scripted.cuda_launch("axpy", 1_000)  # launches keep coming while the flushes write
    time.sleep(0.001)
"""


@pytest.mark.parametrize("after", [0.3, 0.55, 0.8])
def test_a_profile_killed_at_any_moment_of_its_flushes_is_whole(tmp_path, after) -> None:
    program = start_program(tmp_path, {"KNAME_REPORT": "p.json", "KNAME_PROFILE_FLUSH": "0.01"},
                            ENDLESS)  # fmt: skip
    with program:
        assert program.stdout.readline() == "ready\n"
        wait_for(lambda: (tmp_path / "p.json").exists())
        time.sleep(after)
        program.kill()
        program.communicate(timeout=60)
    saved = load(str(tmp_path / "p.json"))
    assert saved["total_launches"] >= 4 and saved["total_gpu_ns"] >= 15_000


WINDOW = """
from kname.profiling import mode
def wait(collecting):
    while mode._session is None or mode._session.collecting is not collecting:
        time.sleep(0.01)
import time
wait(True)
scripted.cuda_launch("_Z6insidev", 5_000)  # L:inside
wait(False)
scripted.cuda_launch("_Z5afterv", 7_000)  # L:after
"""


def test_a_delay_and_a_duration_profile_a_window_of_the_run(tmp_path) -> None:
    window = {"KNAME_PROFILE_DELAY": "0.5", "KNAME_PROFILE_DURATION": "0.5"}
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json", **window}, WINDOW)
    assert done.returncode == 0, done.stderr
    saved = load(str(tmp_path / "p.json"))
    # The launches before the window (the program's first four) and after it are not in it.
    assert [(s["kernel"], s["launches"]) for s in saved["sites"]] == [("_Z6insidev", 1)]
    assert saved["ranks"][0]["pid"] == done.pid
    heading = exit_heading(done.pid, "5.00 us of GPU time in 1 launch from 1 call site")
    assert heading in done.stderr.splitlines()


# --- ranks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_writes_its_own_profile_and_rank_0_alone_prints_its_table(tmp_path, rank):
    job = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
           "CUDA_VISIBLE_DEVICES": str(4 + rank)}  # fmt: skip
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json", **job})
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.glob("p*.json")] == [f"p.rank{rank}.json"]
    (record,) = load(str(tmp_path / f"p.rank{rank}.json"))["ranks"]
    assert (record["rank"], record["world_size"], record["device"]) == (rank, 2, str(4 + rank))
    assert record["pid"] == done.pid
    heading = exit_heading(done.pid, TOTALS, rank=" (rank 0 of 2)")
    assert (heading in done.stderr.splitlines()) is (rank == 0)
    assert ("kname profile" in done.stderr) is (rank == 0)


def test_a_rank_kname_ranks_leaves_out_collects_nothing_and_writes_nothing(tmp_path) -> None:
    job = {"RANK": "1", "WORLD_SIZE": "2", "KNAME_RANKS": "0"}
    done = run_program(tmp_path, {"KNAME_REPORT": "p.json", **job})
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob("p*.json")) == [] and "kname profile" not in done.stderr
