"""On-demand profile windows: `kname attach PID` and KNAME_PROFILE_TRIGGER (profiling/ondemand.py,
requests.py, attach_client.py).

The programs are real processes started with KNAME=1 (`kname run`, kname from the checkout);
their CUDA launches are the stand-in libcupti's (tests/support/fake_cupti.c, through
cupti_stand_in.py), which calls kname's native CUPTI callback as CUPTI does, only while it is
subscribed, and hands over a GPU record per launch. cupti-python itself needs a GPU: its place is
taken by StandInBinding (mocked: kname does not own it and it cannot run here). The program
counts the launches CUPTI called back for (those of the window), and the profile must hold
those and no other.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, line_of

from kname.documents.files import load
from kname.profiling import attach_client, ondemand
from kname.profiling.requests import (
    MAX_SECONDS,
    Request,
    RequestRefused,
    parse_request,
    read_owned,
    refusal,
    runtime_folder,
)

pytestmark = pytest.mark.slow

# A launch loop on the stand-in libcupti: a kernel per launch CUPTI calls back for, a millisecond
# apart, for SECONDS; `ready` is made as the loop starts. It counts the launches CUPTI saw at both
# ends (certainly in the profile) and at their start (possibly: the window may close between),
# and, as a program sees it (tests/gpu/attach_demo.py), those made while kname's session was
# CERTAIN throughout and those made while it was anything but IDLE (collecting_phase; where a
# kname has none, `_collecting` as the demo read it before issue 41).
PROGRAM = """\
import json, os, sys, time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, {tests!r})
from support.cupti_stand_in import (
    CONCURRENT_KERNEL, CUDA_GRAPH_LAUNCH, CUDA_LAUNCH_KERNEL, DRIVER, StandInBinding,
    stand_in_library,
)

sys.modules["cupti"] = SimpleNamespace(cupti=StandInBinding())
from kname.profiling import native_callback

native_callback.libcupti_path = lambda: {library!r}
cupti = stand_in_library(Path({library!r}))
API, GRAPH = CUDA_LAUNCH_KERNEL, 0  # a kernel launch; `setup` may make it a graph's replay
{setup}
seconds, certain, possible, number = float(sys.argv[1]), 0, 0, 0
in_phase = near_phase = 0


def phase():
    sessions = sys.modules.get("kname.profiling.session")
    read = getattr(sessions, "collecting_phase", None)
    if read is not None:
        return read()
    return (2 if getattr(sessions, "_collecting", None) is not None else 0, 0)


Path("ready").touch()
end = time.monotonic() + seconds
while time.monotonic() < end:
    number += 1
    at_start = phase()
    entered = cupti.fake_callback(DRIVER, API, 0, number)  # launch-line
    if entered:
        cupti.fake_kernel(CONCURRENT_KERNEL, number, 10, 30, 7, 0, GRAPH, GRAPH and 1, b"k")
    exited = cupti.fake_callback(DRIVER, API, 1, number)
    at_end = phase()
    # Collecting at both ends: recorded for sure; at the start only: CUPTI stopped meanwhile.
    certain += entered and exited
    possible += entered
    in_phase += at_start[0] == 2 and at_end == at_start
    near_phase += at_start[0] != 0 or at_end[0] != 0 or at_end[1] != at_start[1]
    time.sleep(0.001)
counts = {{"certain": certain, "possible": possible, "launched": number,
           "in_phase": in_phase, "near_phase": near_phase, "finalized": cupti.fake_finalized()}}
Path("count.json").write_text(json.dumps(counts))
print("done")
"""


@pytest.fixture
def start(fake_libcupti: Path, tmp_path: Path):
    """Start PROGRAM under `kname run` in tmp_path for `seconds`: the process (killed after)."""
    started: list[subprocess.Popen] = []

    def start_program(
        seconds: float, env: dict[str, str] | None = None, setup: str = "", folder: Path = tmp_path
    ) -> subprocess.Popen:
        folder.mkdir(exist_ok=True)
        source = PROGRAM.format(tests=str(REPO / "tests"), library=str(fake_libcupti), setup=setup)
        (folder / "prog.py").write_text(source)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
        environ.update(KNAME="1", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **(env or {}))
        process = subprocess.Popen(
            [sys.executable, "prog.py", str(seconds)], cwd=folder, env=environ,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(process)
        deadline = time.monotonic() + 60
        while not (folder / "ready").exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return process

    yield start_program
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def kname_attach(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KNAME")}
    env.pop("XDG_RUNTIME_DIR", None)
    env.update(PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "kname", "attach", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def counted(folder: Path) -> dict[str, int]:
    return json.loads((folder / "count.json").read_text())


def window_only(profile: dict, folder: Path) -> bool:
    """Whether the profile holds the launches the program made while CUPTI collected, no other
    (and at least one)."""
    count = counted(folder)
    return 0 < count["certain"] <= profile["total_launches"] <= count["possible"]


# --- kname attach ------------------------------------------------------------------------------


def test_attach_profiles_only_the_window_and_prints_the_table(start, tmp_path: Path) -> None:
    process = start(4)
    time.sleep(0.5)  # launches before the window: not in the profile
    done = kname_attach(str(process.pid), "--duration", "1", "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0 and "done" in out, err
    line = line_of(PROGRAM, "launch-line")  # `setup` is one line: the template's numbering
    profile = load(str(tmp_path / "p.json"))
    # Only the window's launches, every one: the program counted those CUPTI called back for.
    assert window_only(profile, tmp_path)
    assert profile["total_launches"] < counted(tmp_path)["launched"]
    (site,) = profile["sites"]
    assert site["name"] == f"<module> prog.py:{line}"
    assert f"<module> prog.py:{line}" in done.stdout  # the table, printed by the command
    # Its heading names the process, as the tables at exit do.
    assert done.stdout.startswith(f"kname profile of process {process.pid}: ")
    assert f"kname attach: wrote {tmp_path / 'p.json'}" in done.stderr
    window = profile["ranks"][0]["window"]
    assert window["by"] == "attach" and 0 < window["start_ns"] < window["end_ns"]
    assert not (Path(runtime_folder()) / f"{process.pid}.request").exists()


def test_attach_asks_in_the_runtime_folder_the_process_uses_not_its_own(start, tmp_path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    process = start(4, env={"XDG_RUNTIME_DIR": str(runtime)})
    done = kname_attach(str(process.pid), "--duration", "0.5", cwd=tmp_path)  # no XDG_RUNTIME_DIR
    assert done.returncode == 0, done.stderr
    assert "<module> prog.py:" in done.stdout
    assert stat.S_IMODE((runtime / "kname").stat().st_mode) == 0o700


def test_a_process_that_ends_during_the_window_writes_its_files_whole(start, tmp_path) -> None:
    process = start(4)
    done = kname_attach(
        str(process.pid), "--duration", "30", "--json", "p.json", "--html", "p.html", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    process.communicate(timeout=60)
    assert "the process ended" in done.stderr and "into the 30 s window" in done.stderr
    profile = load(str(tmp_path / "p.json"))  # whole: it validates
    assert window_only(profile, tmp_path)
    assert (tmp_path / "p.html").read_text().rstrip().endswith("</html>")


def test_a_process_ended_by_sigterm_during_the_window_writes_its_files(start, tmp_path) -> None:
    process = start(30)
    attach = subprocess.Popen(
        [sys.executable, "-m", "kname", "attach", str(process.pid), "--json", "p.json"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    # CUPTI collects once the process says so (its first window's line on stderr).
    for line in process.stderr:
        if "profile: collecting through" in line:
            break
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    _, err = attach.communicate(timeout=60)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM  # it still dies of it
    assert attach.returncode == 0, err
    assert load(str(tmp_path / "p.json"))["total_launches"] > 0  # killed: the program counts none


def test_under_another_cupti_tool_attach_says_so_and_the_process_runs_on(start, tmp_path) -> None:
    process = start(4, setup="cupti.fake_refuse(39, b'nsys')")
    done = kname_attach(str(process.pid), "--duration", "1", "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"kname attach: process {process.pid}: no GPU time can be collected")
    assert "CUPTI is already in use by 'nsys'" in line
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and "done" in out
    assert not (tmp_path / "p.json").exists()


# CUPTI's registering and flushing take 20 ms more in the stand-in: some 15 launches are called
# back during each (a real flush takes as long as its buffers do).
SLOW = "cupti.fake_slow(20000)"


def test_a_second_window_profiles_only_its_own_launches(start, tmp_path) -> None:
    process = start(8, setup=SLOW)  # room for two attaches on a loaded machine
    first = kname_attach(str(process.pid), "--duration", "0.5", "--json", "a.json", cwd=tmp_path)
    second = kname_attach(str(process.pid), "--duration", "0.5", "--json", "b.json", cwd=tmp_path)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    process.communicate(timeout=60)
    launches = [load(str(tmp_path / name))["total_launches"] for name in ("a.json", "b.json")]
    count = counted(tmp_path)
    # Every launch called back at both ends has its record: a stop unsubscribes, then disables
    # the records, then flushes (issue 41: flushed first, the launches called back during the
    # flush kept none). CUPTI was finalized after the first window, and the second started it.
    assert 0 not in launches and count["certain"] <= sum(launches) <= count["possible"]
    assert count["finalized"] >= 1


def test_the_programs_own_count_from_the_session_phase_bounds_each_window(start, tmp_path) -> None:
    process = start(6, setup=SLOW)
    done = kname_attach(str(process.pid), "--duration", "1", "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    process.communicate(timeout=60)
    count = counted(tmp_path)
    # The phase is POSSIBLE from before CUPTI is called until its stop has ended, CERTAIN only
    # while every launch is recorded (issue 41: with `_collecting`, set after CUPTI started and
    # cleared before it stopped, the launches called back during the start were not counted).
    assert 0 < count["in_phase"] <= load(str(tmp_path / "p.json"))["total_launches"]
    assert load(str(tmp_path / "p.json"))["total_launches"] <= count["near_phase"]


def test_a_window_that_traced_graphs_leaves_cupti_attached_and_says_so(start, tmp_path) -> None:
    process = start(4, setup="API, GRAPH = CUDA_GRAPH_LAUNCH, 5")  # a graph replayed each time
    done = kname_attach(str(process.pid), "--duration", "1", "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    process.communicate(timeout=60)
    # On the H100 a graph replayed under CUPTI failed at its next replay once CUPTI was
    # finalized (unspecified launch failure): with graph work in the window, no finalize.
    assert "CUPTI stays attached to this process after the window" in done.stderr
    assert counted(tmp_path)["finalized"] == 0
    assert window_only(load(str(tmp_path / "p.json")), tmp_path)


def test_attach_is_refused_while_a_kname_profile_session_collects(start, tmp_path) -> None:
    process = start(4, setup="import kname; session = kname.profile(); session.start()")
    done = kname_attach(str(process.pid), "--duration", "0.5", cwd=tmp_path)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert "a kname profile session is collecting in this process already" in line
    process.communicate(timeout=60)


def test_a_process_without_kname_is_refused_in_one_line(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        done = kname_attach(str(process.pid), "--duration", "1", cwd=tmp_path)
    finally:
        process.kill()
        process.wait()
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert f"process {process.pid} was not started with KNAME=1" in line


def test_a_request_writable_by_others_is_refused_and_no_window_opens(start, tmp_path) -> None:
    process = start(3)
    folder = runtime_folder(make=True)
    request = Path(folder) / f"{process.pid}.request"
    request.write_text("duration=1\njson=/tmp/never.json\n")
    request.chmod(0o666)
    reply = Path(folder) / f"{process.pid}.reply"
    os.kill(process.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 20
    while not reply.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    answer = json.loads(reply.read_text())
    reply.unlink()
    assert "is writable by others (mode 666" in answer["refused"]
    process.communicate(timeout=60)
    assert counted(tmp_path)["possible"] == 0


# --- The trigger file ------------------------------------------------------------------------


def test_one_trigger_gives_each_rank_its_file_for_the_same_window(start, tmp_path) -> None:
    trigger = tmp_path / "kname.trigger"
    processes = []
    for rank in (0, 1):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)}
        env["KNAME_PROFILE_TRIGGER"] = str(trigger)
        folder = tmp_path / f"rank{rank}"
        processes.append(start(5 + ondemand.POLL_SECONDS * 2, env=env, folder=folder))
    trigger.write_text("duration=1\n")
    trigger.chmod(0o600)
    windows = {}
    for rank, process in enumerate(processes):
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        profile = load(str(tmp_path / f"kname-profile.rank{rank}.json"))
        assert window_only(profile, tmp_path / f"rank{rank}")
        record = profile["ranks"][0]
        assert record["rank"] == rank and record["window"]["by"] == "trigger"
        windows[rank] = record["window"]
    # The same window: each starts when every rank has seen the trigger (touched + POLL), to
    # the poll's jitter.
    starts = [window["start_ns"] for window in windows.values()]
    assert max(starts) - min(starts) < 0.5e9, windows


@pytest.mark.parametrize(
    "contents, said",
    [
        ("duration=forever\n", "duration='forever' is not a number of seconds"),
        ("rm -rf /\n", "line 1 is not one of duration=, json=, trace=, html="),
        ("json=a.json\nhtml=a.json\n", "two outputs name one file"),
        ("json=p.{user}.json\n", "an unknown placeholder '{user}'"),
    ],
)
def test_a_bad_trigger_is_one_line_and_no_window(start, tmp_path, contents, said) -> None:
    trigger = tmp_path / "kname.trigger"
    process = start(ondemand.POLL_SECONDS * 2 + 1, env={"KNAME_PROFILE_TRIGGER": str(trigger)})
    trigger.write_text(contents)
    trigger.chmod(0o600)
    _, err = process.communicate(timeout=60)
    (line,) = [line for line in err.splitlines() if "KNAME_PROFILE_TRIGGER" in line]
    assert said in line and "no profile window" in line
    assert counted(tmp_path)["possible"] == 0


def test_a_trigger_others_can_write_is_refused(start, tmp_path) -> None:
    trigger = tmp_path / "kname.trigger"
    process = start(ondemand.POLL_SECONDS * 2 + 1, env={"KNAME_PROFILE_TRIGGER": str(trigger)})
    trigger.write_text("duration=1\n")
    trigger.chmod(0o622)
    _, err = process.communicate(timeout=60)
    assert "is writable by others (mode 622; chmod go-w it); no profile window" in err
    assert counted(tmp_path)["possible"] == 0
    assert not (tmp_path / "kname-profile.json").exists()


# --- The rules, without a process ---------------------------------------------------------------

paths = st.from_regex(r"/?[a-z0-9_]{1,8}(/[a-z0-9_.]{1,8}){0,3}(\.\{rank\})?\.json", fullmatch=True)


@given(
    duration=st.integers(1, int(MAX_SECONDS)).map(float),
    outputs=st.lists(paths, min_size=0, max_size=3, unique=True),
)
def test_a_request_read_back_from_its_text_is_the_same_request(duration, outputs) -> None:
    request = Request(duration, **dict(zip(("json", "trace", "html"), outputs, strict=False)))
    request = parse_request(request.text(), "/base", "test")  # its paths made absolute
    assert parse_request(request.text(), "/elsewhere", "test") == request


@given(text=st.text(max_size=200))
def test_any_text_is_a_request_or_one_line_refusing_it(text) -> None:
    try:
        request = parse_request(text, "/base", "the trigger")
    except RequestRefused as exc:
        assert "\n" not in str(exc) and str(exc).startswith("the trigger")
    else:
        assert 0 < request.duration <= MAX_SECONDS
        assert all(os.path.isabs(path) for path in request.outputs().values())


def test_a_relative_output_is_taken_from_the_trigger_folder() -> None:
    assert parse_request("json=out/p.json", "/shared", "t").json == "/shared/out/p.json"


def test_a_file_of_another_user_or_a_link_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.write_text("duration=1")
    mine.chmod(0o600)
    assert read_owned(str(mine), "it") == "duration=1"
    link = tmp_path / "link"
    link.symlink_to(mine)
    with pytest.raises(RequestRefused, match="it is a symbolic link"):
        read_owned(str(link), "it")
    status = os.lstat(mine)
    assert "owned by uid" in refusal(status, "it", uid=status.st_uid + 1)
    assert refusal(status, "it", uid=status.st_uid) is None
    assert "not a regular file" in refusal(os.lstat("/dev/null"), "it")


def test_a_runtime_folder_open_to_others_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = Path(runtime_folder(make=True))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o755)
    with pytest.raises(RequestRefused, match="is open to others"):
        runtime_folder()


def test_attach_refuses_a_process_id_that_is_no_process() -> None:
    with pytest.raises(attach_client.AttachError, match="no process"):
        attach_client.answers(2**22 + 12345)


def test_a_trigger_of_a_program_with_its_own_sigusr2_works_and_is_written_at_exit(
    start, tmp_path
) -> None:
    """The program took SIGUSR2 for itself: the trigger's window runs on the watcher's thread,
    and the process, ending during it, still writes its file whole."""
    trigger = tmp_path / "kname.trigger"
    own = "import signal; signal.signal(signal.SIGUSR2, lambda *args: None)"
    process = start(
        ondemand.POLL_SECONDS * 2 + 1, env={"KNAME_PROFILE_TRIGGER": str(trigger)}, setup=own
    )
    trigger.write_text("duration=60\n")
    trigger.chmod(0o600)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert window_only(load(str(tmp_path / "kname-profile.json")), tmp_path)
    assert "the process ended" in err and "into the 60 s window" in err
