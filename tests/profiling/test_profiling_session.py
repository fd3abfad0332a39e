"""A profiling session from start to outputs, with CUPTI replaced by a scripted stand-in.

The stand-in does what the CUPTI collector does with CUPTI's callbacks (which need a GPU):
launch calls go to the session's capture with the caller's real frame, GPU records to its join
and log. Everything after that is the real session: the document, table, JSON, trace and page,
and the outputs written at exit, in a real subprocess, also after sys.exit and an exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support import REPO, ended_by_sigterm

from kname import callsite, naming
from kname.config import DEFAULT_FORMAT
from kname.documents.files import load
from kname.documents.sources import lines_of
from kname.profiling.records import ActivityRecord, load_streams
from kname.profiling.session import ProfileSession

pytestmark = pytest.mark.launches

SCRIPTED = '''
import sys

from kname.profiling.records import ActivityRecord


class ScriptedCupti:
    """Stands in for CuptiCollector: what CUPTI would call, driven by the test."""

    def __init__(self, capture, join, log):
        self.capture, self.join, self.log = capture, join, log
        self.started = False
        self.starts = 0
        self.next_id = 0

    def start(self):
        self.starts += 1
        self.started = True
        return True

    def stop(self):
        self.started = False

    def launch(self, kernel, gpu_ns, api="cuLaunchKernel"):
        """A launch API call from the caller's line, and the kernel record it causes."""
        self.next_id += 1
        start = 1_000 * self.next_id
        self.capture.enter(sys._getframe(1), self.next_id, api, False, start)
        self.capture.exit(self.next_id, start + 300)
        begin = start + 500
        record = ActivityRecord("kernel", self.next_id, kernel, begin, begin + gpu_ns, 7)
        self.join.add_activities([record])
        if self.log is not None:
            self.log.add_activities([record])
'''

namespace: dict = {}
exec(compile(SCRIPTED, "scripted_cupti", "exec"), namespace)
ScriptedCupti = namespace["ScriptedCupti"]


@pytest.fixture
def session():
    callsite.configure((), DEFAULT_FORMAT, 1, False)
    made = ProfileSession(keep_streams=True, collector=ScriptedCupti)
    yield made
    made.stop()  # a test that started it and did not stop it leaves no session collecting
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.clear()


def this_line(offset: int = 0) -> str:
    """kname's name for the caller's line plus `offset`."""
    facts = naming.frame_facts(sys._getframe(1))
    facts = facts._replace(line=facts.line + offset)
    return naming.display_name(DEFAULT_FORMAT, "", "", [facts])


def test_a_session_collects_and_ranks_gpu_time_per_line(session):
    with session as profile:
        assert profile.collecting
        axpy = this_line(+2)
        for _ in range(3):
            profile.collector.launch("axpy", 2_000)
        scale = this_line(+1)
        profile.collector.launch("_Z9scale_rawPfi", 9_000)
    assert not session.collecting
    assert [(s["name"], s["launches"], s["gpu_ns"]) for s in session.sites] == [
        (scale, 1, 9_000),
        (axpy, 3, 6_000),
    ]
    table = session.table().splitlines()
    assert table[0] == "kname profile: 15.0 us of GPU time in 4 launches from 2 call sites"
    assert "scale_raw 9.00 us (1)" in table[2]


def test_the_saved_profile_keeps_the_source_of_its_lines(session, tmp_path):
    with session as profile:
        axpy = this_line(+1)
        profile.collector.launch("axpy", 2_000)  # the line the page shows
    session.save(tmp_path / "p.json")
    document = load(str(tmp_path / "p.json"))
    path, line = axpy.rsplit(" ", 1)[1].rsplit(":", 1)
    kept = lines_of(document["sources"][path])
    assert kept[int(line)].endswith("# the line the page shows")
    source = Path(__file__).read_text().splitlines()
    assert all(source[number - 1] == text for number, text in kept.items())


def test_start_twice_starts_once(session):
    session.start()
    session.start()
    assert session.collector.starts == 1


def test_the_outputs_are_written_and_read_back(session, tmp_path):
    with session:
        session.collector.launch("axpy", 2_000)
    session.save(tmp_path / "p.json")
    session.save_trace(tmp_path / "t.json")
    session.save_html(tmp_path / "p.html")
    session.save_streams(tmp_path / "s.json", device="none")
    assert load(str(tmp_path / "p.json")) == session.document()
    trace = json.loads((tmp_path / "t.json").read_text())
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == [
        "cuLaunchKernel",
        f"{session.sites[0]['name']} / axpy",
    ]
    assert "<svg" in (tmp_path / "p.html").read_text()
    streams = load_streams(str(tmp_path / "s.json"))
    assert streams.meta["device"] == "none" and streams.meta["pid"] == os.getpid()
    assert [r.site for r in streams.launches] == [session.sites[0]["name"]]
    assert streams.activities == [ActivityRecord("kernel", 1, "axpy", 1_500, 3_500, 7)]


@pytest.mark.parametrize(("launches", "cap"), [(3, 1), (3, 4), (3, 6), (3, 7), (5, 9)])
def test_a_trace_past_its_cap_keeps_the_first_records_and_is_said_once(
    launches, cap, tmp_path, capsys
):
    callsite.configure((), DEFAULT_FORMAT, 1, False)
    session = ProfileSession(keep_streams=True, collector=ScriptedCupti, max_records=cap)
    with session:
        for _ in range(launches):
            session.collector.launch("axpy", 2_000)
    session.save_trace(tmp_path / "first.json")
    session.save_trace(tmp_path / "again.json")  # a flush, then the exit: one line still
    events = json.loads((tmp_path / "again.json").read_text())["traceEvents"]
    # A launch call, then its kernel: the first `cap` of them are the trace's timed events.
    assert len([e for e in events if e["ph"] == "X"]) == min(cap, 2 * launches)
    said = [line for line in capsys.readouterr().err.splitlines() if "the trace keeps" in line]
    dropped = 2 * launches - cap
    assert said == [
        f"kname: profile: the trace keeps at most {cap} records (launch calls, GPU records, "
        f"graph node events; KNAME_PROFILE_TRACE_MAX); {dropped} later ones are not in it"
    ] * (dropped > 0)


def test_streams_need_a_session_that_keeps_them():
    plain = ProfileSession(collector=ScriptedCupti)
    with pytest.raises(ValueError, match="keep_streams=True"):
        plain.streams()


def test_a_forked_child_can_take_every_session_lock_another_thread_held(session):
    """os.fork() copies a lock as it is: one that another thread held stays held in the child,
    where only the forking thread lives on. kname's fork handler frees its own locks."""
    session.start()
    locks = {"session": session._lock, "join": session.join._lock, "log": session.log._lock}
    held, release = threading.Event(), threading.Event()

    def hold():
        for lock in locks.values():
            lock.acquire()
        held.set()
        release.wait(10)
        for lock in reversed(locks.values()):
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status, run no pytest code
            stuck = [i for i, lock in enumerate(locks.values()) if not lock.acquire(timeout=2)]
            if not stuck:
                session.table()  # the join's lock again, and the log's: both re-entrant
                session.streams()
            os._exit(10 + stuck[0] if stuck else 0)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        holder.join()
    code = os.waitstatus_to_exitcode(status)
    assert code == 0, f"the {list(locks)[code - 10]} lock stayed held in the child"


PROGRAM = """
import sys
{scripted}
from kname import callsite, naming
from kname.config import DEFAULT_FORMAT
from kname.profiling.session import ProfileSession

callsite.configure((), DEFAULT_FORMAT, 1, False)
session = ProfileSession(keep_streams=True, collector=ScriptedCupti)
session.start()
session.write_at_exit(json="out/p.json", trace="out/t.json", html="out/p.html")
session.collector.launch("axpy", 2_000)  # the launch line
{ending}
"""


def exit_heading(saved: dict) -> str:
    """The heading PROGRAM's table at exit has: the process that wrote `saved` (its pid), and
    the one launch's time."""
    pid = saved["ranks"][0]["pid"]
    return f"kname profile of process {pid}: 2.00 us of GPU time in 1 launch from 1 call site"


@pytest.mark.parametrize(
    ("ending", "code"),
    [("", 0), ("sys.exit(3)", 3), ("raise RuntimeError('the program failed')", 1)],
)
def test_at_exit_the_table_and_files_are_written_however_the_program_ends(tmp_path, ending, code):
    (tmp_path / "out").mkdir()
    script = tmp_path / "app.py"
    script.write_text(PROGRAM.format(scripted=textwrap.dedent(SCRIPTED), ending=ending))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == code, done.stderr
    lines = PROGRAM.format(scripted=textwrap.dedent(SCRIPTED), ending=ending).splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "# the launch line" in text)
    assert f"<module> app.py:{line}" in done.stderr
    saved = load(str(tmp_path / "out" / "p.json"))
    assert exit_heading(saved) in done.stderr.splitlines()
    assert saved["sites"][0]["name"] == f"<module> app.py:{line}"
    assert json.loads((tmp_path / "out" / "t.json").read_text())["traceEvents"]
    assert (tmp_path / "out" / "p.html").read_text().startswith("<!DOCTYPE html>")
    if code == 1:
        assert "RuntimeError: the program failed" in done.stderr


SIGTERM_ENDING = """
import signal, time
if sys.argv[1:] == ["own-handler"]:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("handler", ["default", "own-handler"])
def test_a_program_ended_by_sigterm_still_writes_its_outputs(tmp_path, handler):
    import signal

    (tmp_path / "out").mkdir()
    program = PROGRAM.format(scripted=textwrap.dedent(SCRIPTED), ending=SIGTERM_ENDING)
    (tmp_path / "app.py").write_text(program)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code, stderr = ended_by_sigterm([sys.executable, "app.py", handler], tmp_path, env)
    # Killed by SIGTERM as without kname, or ended by the program's own handler (and atexit).
    assert code == (-signal.SIGTERM if handler == "default" else 7), stderr
    line = next(n for n, text in enumerate(program.splitlines(), 1) if "# the launch line" in text)
    saved = load(str(tmp_path / "out" / "p.json"))
    assert exit_heading(saved) in stderr.splitlines()
    assert [(s["name"], s["launches"]) for s in saved["sites"]] == [(f"<module> app.py:{line}", 1)]
    assert json.loads((tmp_path / "out" / "t.json").read_text())["traceEvents"]
    assert (tmp_path / "out" / "p.html").read_text().startswith("<!DOCTYPE html>")
    assert "Traceback" not in stderr


def test_an_output_that_cannot_be_written_is_one_line(tmp_path):
    script = tmp_path / "app.py"
    program = PROGRAM.format(scripted=textwrap.dedent(SCRIPTED), ending="")
    script.write_text(program.replace('json="out/p.json"', 'json="missing/dir/p.json"'))
    (tmp_path / "out").mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0
    problems = [line for line in done.stderr.splitlines() if "could not be written" in line]
    assert len(problems) == 1 and "missing/dir/p.json" in problems[0]
    assert "Traceback" not in done.stderr
    assert (tmp_path / "out" / "t.json").exists()


# --- a long run's flushes, and who made the profile (issue 30) -----------------------------------


@pytest.fixture
def no_exit_hooks(monkeypatch):
    """write_at_exit() without its atexit and SIGTERM hooks in this test process: the tests
    call the exit's write themselves (programs that really end are run above). The owner's
    marks it sets in the environment are taken away after the test, as other tests' programs
    inherit this environment."""
    from kname.documents.owner import OWNER_RANK_VARIABLE, OWNER_VARIABLE
    from kname.profiling import session as session_module

    monkeypatch.setattr(session_module, "at_exit", lambda write: write)
    for variable in (OWNER_VARIABLE, OWNER_RANK_VARIABLE):
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)


def test_a_flush_rewrites_the_json_and_the_page_with_the_totals_so_far(
    session, tmp_path, no_exit_hooks
):
    session.start()
    session.write_at_exit(
        json=str(tmp_path / "p.json"), trace=str(tmp_path / "t.json"),
        html=str(tmp_path / "p.html"), print_table=False,
    )  # fmt: skip
    session.collector.launch("axpy", 2_000)
    session.flush()
    assert load(str(tmp_path / "p.json"))["total_launches"] == 1
    assert 'data-gpu-ns="2000"' in (tmp_path / "p.html").read_text()
    assert not (tmp_path / "t.json").exists()  # the trace is written at exit only
    session.collector.launch("axpy", 2_000)
    session.flush()
    assert load(str(tmp_path / "p.json"))["total_launches"] == 2
    session._at_exit()
    assert (tmp_path / "t.json").exists()
    session.collector.launch("axpy", 2_000)
    session.flush()  # after the exit's write: nothing
    assert load(str(tmp_path / "p.json"))["total_launches"] == 2


def test_flush_every_flushes_from_a_thread_until_the_exit(session, tmp_path, no_exit_hooks):
    session.start()
    session.write_at_exit(json=str(tmp_path / "p.json"), print_table=False)
    session.collector.launch("axpy", 2_000)
    session.flush_every(0.01)
    deadline = time.monotonic() + 30
    while not (tmp_path / "p.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    session._at_exit()
    session._flusher.join(timeout=30)
    assert not session._flusher.is_alive()


@pytest.mark.parametrize(
    ("visible", "ordinal", "device"), [("2,3", 1, "3"), (None, 1, "1"), ("5", None, "5")]
)
def test_the_profile_names_its_gpu_as_cuda_visible_devices_does(
    session, monkeypatch, visible, ordinal, device
) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    session.collector.current_device = lambda: ordinal  # the device of this thread's context
    (record,) = session.document()["ranks"]
    assert record["device"] == device and record["pid"] == os.getpid()


def test_where_cupti_cannot_start_the_table_says_no_gpu_time_was_collected_and_why(capsys):
    # No stand-in libcupti here: the real collector fails to start (no binding or no driver).
    import kname
    from kname.profiling.cupti_collector import CuptiCollector

    with kname.profile() as p:
        pass  # the block runs as usual
    assert isinstance(p.collector, CuptiCollector) and not p.collecting
    table = p.table()
    assert table.startswith("kname profile: no GPU time was collected (")
    why = p.collector.not_started
    assert why and f"({why})" in table and "0 launches" not in table
    assert "not collected in this run" in capsys.readouterr().err  # the line said at start


def test_a_second_session_says_another_one_collects(session):
    session.start()
    second = ProfileSession(collector=ScriptedCupti)
    assert not second.start()
    assert "another kname profile session is collecting" in second.table()
    assert "no GPU time" not in session.table()  # the first one collects
