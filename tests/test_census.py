"""The launch census: kname.report() as a table and as JSON, and KNAME_REPORT at exit.

Counting runs for real: numba kernels on the CUDA simulator, in a subprocess of a venv with
kname's wheel installed. The document's rendering, validation, comparison and writing are
checked in-process in the test_documents_*.py modules.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from support import Venv, cleaned, kernels, line_of
from support.nvtx_capture import run_captured

import kname
from kname.documents.files import load
from kname.documents.merge import merge_documents
from kname.documents.owner import OWNER_VARIABLE
from kname.documents.sources import lines_of

pytestmark = pytest.mark.launches

APP = kernels.program("""\
import os
import sys

import kname


@cuda.jit
def scale(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] *= a


def step(out, x):
    axpy[1, 4](out, 2.0, x)  # axpy-line
    scale[1, 4](out, 0.5)  # scale-line


def main():
    out, x = np.zeros(4), np.ones(4)
    for _ in range(3):
        step(out, x)
    axpy[1, 4](out, 1.0, x)  # main-line
    if "--table" in sys.argv:
        kname.report()
    if "--json" in sys.argv:
        kname.report(format="json")
    os.chdir("/")  # a relative KNAME_REPORT still means where the program started
    sys.exit(int(os.environ.get("APP_EXIT", "0")))


main()
""")

# (name, kernel, launches) of APP's call sites, in first-seen order.
EXPECTED = [
    (f"step app.py:{line_of(APP, 'axpy-line')}", "axpy", 3),
    (f"step app.py:{line_of(APP, 'scale-line')}", "scale", 3),
    (f"main app.py:{line_of(APP, 'main-line')}", "axpy", 1),
]
TOTAL = 7
SITE_KEYS = {"name", "kernel", "lib", "launches", "share", "order"}


def assert_census_schema(document: object) -> None:
    """Schema 1, checked independently of kname's own validate()."""
    assert isinstance(document, dict)
    assert set(document) - {"sources"} == {"kname", "schema", "sites", "total_launches", "ranks"}
    (record,) = document["ranks"]  # who wrote it: a lone process, rank 0 of 1
    assert (record["rank"], record["world_size"], record["launcher"]) == (0, 1, None)
    assert record["host"] == socket.gethostname() and type(record["pid"]) is int
    assert document["kname"] == kname.__version__
    assert document["schema"] == 1
    sites = document["sites"]
    assert isinstance(sites, list)
    total = document["total_launches"]
    assert type(total) is int and total == sum(s["launches"] for s in sites)
    for order, site in enumerate(sites, 1):
        assert set(site) == SITE_KEYS
        assert all(type(site[k]) is str for k in ("name", "kernel", "lib"))
        assert type(site["launches"]) is int and site["launches"] > 0
        assert site["order"] == order
        assert isinstance(site["share"], float)
        assert site["share"] == round(site["launches"] / total, 6)


def assert_keeps_the_source_of_its_lines(document: dict) -> None:
    """The saved census holds app.py's source, as it is, around each of its sites' lines."""
    assert list(document["sources"]) == ["app.py"]
    kept = lines_of(document["sources"]["app.py"])
    source = APP.splitlines()
    assert kept and all(kept[number] == source[number - 1] for number in kept)
    for name, _kernel, _launches in EXPECTED:
        assert int(name.rsplit(":", 1)[1]) in kept


def expected_sites() -> list[dict]:
    return [
        {"name": name, "kernel": kernel, "lib": "numba", "launches": launches,
         "share": round(launches / TOTAL, 6), "order": order}
        for order, (name, kernel, launches) in enumerate(EXPECTED, 1)
    ]  # fmt: skip


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


# Each run owns its KNAME_REPORT, even if this test process ever set the owner variable.
NOT_BENEATH = {OWNER_VARIABLE: ""}


def run_app(venv: Venv, app: Path, *args: str, env: dict[str, str] | None = None):
    environ = {"KNAME": "1", "NUMBA_ENABLE_CUDASIM": "1", **NOT_BENEATH, **(env or {})}
    return venv.python_run("app.py", *args, env=environ, cwd=app)


# --- counting, for real --------------------------------------------------------------------


@pytest.mark.slow
def test_report_json_follows_schema_1_and_counts_each_call_site(kname_venv: Venv, app) -> None:
    result = run_app(kname_venv, app, "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    document = json.loads(result.stdout)
    assert_census_schema(document)
    assert document["sites"] == expected_sites()
    assert document["total_launches"] == TOTAL
    assert_keeps_the_source_of_its_lines(document)


@pytest.mark.slow
def test_report_table_has_a_row_per_call_site_most_launches_first(kname_venv: Venv, app) -> None:
    result = run_app(kname_venv, app, "--table")
    assert result.returncode == 0, result.stderr
    heading, header, *rows = result.stdout.splitlines()
    assert heading == "kname census: 7 launches from 3 call sites"
    assert header.split() == ["call", "site", "kernel", "library", "launches", "share", "first",
                              "seen"]  # fmt: skip
    assert [row.rsplit(None, 5)[0] for row in rows] == [name for name, _, _ in EXPECTED]
    assert [row.split()[-5:] for row in rows] == [
        ["axpy", "numba", "3", "42.9%", "1"],
        ["scale", "numba", "3", "42.9%", "2"],
        ["axpy", "numba", "1", "14.3%", "3"],
    ]


@pytest.mark.slow
def test_kname_report_dash_prints_the_table_on_stderr_at_exit(kname_venv: Venv, app) -> None:
    table = run_app(kname_venv, app, "--table").stdout
    result = run_app(kname_venv, app, env={"KNAME_REPORT": "-"})
    assert result.returncode == 0
    assert result.stdout == ""
    heading, *rows = result.stderr.splitlines(keepends=True)
    assert re.fullmatch(r"kname census of process \d+: 7 launches from 3 call sites\n", heading)
    assert rows == table.splitlines(keepends=True)[1:]


@pytest.mark.slow
def test_kname_report_path_writes_the_json_census_atomically(kname_venv: Venv, app) -> None:
    result = run_app(kname_venv, app, env={"KNAME_REPORT": "census.json"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == result.stderr == ""
    document = json.loads((app / "census.json").read_text())
    assert_census_schema(document)
    assert document["sites"] == expected_sites()
    assert_keeps_the_source_of_its_lines(document)  # read at exit, after a chdir
    # The temporary file was renamed into place: nothing else is left beside it.
    assert sorted(p.name for p in app.iterdir() if p.name != "__pycache__") == [
        "app.py",
        "census.json",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["missing-directory/census.json", "a-directory"])
def test_an_unwritable_report_path_gives_one_line_and_keeps_the_exit_code(
    kname_venv: Venv, app: Path, where: str
) -> None:
    (app / "a-directory").mkdir()
    result = run_app(kname_venv, app, env={"KNAME_REPORT": where, "APP_EXIT": "3"})
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kname: KNAME_REPORT=")
    assert where in lines[0] and "census was not saved" in lines[0]


@pytest.mark.slow
def test_census_mode_counts_launches_without_nvtx_ranges(
    kname_venv: Venv, app: Path, inject_lib: Path, tmp_path: Path
) -> None:
    def run(mode: str):
        env = {"KNAME": "1", "KNAME_MODE": mode, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": None,
               OWNER_VARIABLE: None}  # fmt: skip
        args = [str(kname_venv.python), "app.py", "--json"]
        return run_captured(args, inject_lib, tmp_path, env=env, cwd=app)

    census_run, census_capture = run("census")
    nvtx_run, nvtx_capture = run("nvtx")
    assert census_run.returncode == nvtx_run.returncode == 0, census_run.stderr
    assert json.loads(census_run.stdout)["sites"] == expected_sites()
    assert census_capture.ranges("kname") == []
    # The same program in the default mode does emit a range per launch.
    expected_ranges = [name for name, _, launches in EXPECTED for _ in range(launches)]
    assert sorted(nvtx_capture.ranges("kname")) == sorted(expected_ranges)


@pytest.mark.slow
def test_a_process_beneath_the_owner_writes_a_census_of_its_own(kname_venv: Venv, app) -> None:
    parent = "import subprocess, sys; subprocess.run([sys.executable, 'app.py'], check=True)"
    result = kname_venv.python_run(
        "-c", parent, cwd=app,
        env={"KNAME": "1", "NUMBA_ENABLE_CUDASIM": "1", "KNAME_REPORT": "c.json", **NOT_BENEATH},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # The parent launched nothing: its census is empty, and the child's did not overwrite it.
    assert json.loads((app / "c.json").read_text())["total_launches"] == 0
    (child,) = app.glob("c.pid*.json")
    assert re.fullmatch(r"c\.pid\d+\.json", child.name)
    assert json.loads(child.read_text())["sites"] == expected_sites()


@pytest.mark.slow
def test_a_child_given_a_kname_report_of_its_own_owns_it(kname_venv: Venv, app) -> None:
    """The parent's mark is for its own path: a child run with KNAME_REPORT=b.json writes
    b.json, not b.pid<N>.json beside a file nobody writes."""
    parent = (
        "import os, subprocess, sys\n"
        "subprocess.run([sys.executable, 'app.py'], check=True,\n"
        "               env={**os.environ, 'KNAME_REPORT': 'b.json'})\n"
    )
    result = kname_venv.python_run(
        "-c", parent, cwd=app,
        env={"KNAME": "1", "NUMBA_ENABLE_CUDASIM": "1", "KNAME_REPORT": "a.json", **NOT_BENEATH},
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert sorted(path.name for path in app.glob("*.json")) == ["a.json", "b.json"]
    assert json.loads((app / "b.json").read_text())["sites"] == expected_sites()
    assert json.loads((app / "a.json").read_text())["total_launches"] == 0


# --- kname.report() -----------------------------------------------------------------------


def test_report_accepts_only_table_and_json() -> None:
    with pytest.raises(ValueError, match=r"format='xml'.*'table' and 'json'"):
        kname.report(format="xml")


def test_report_writes_a_path_atomically_and_a_stream_as_is(tmp_path: Path) -> None:
    target = tmp_path / "census.json"
    target.write_text("old")
    kname.report(target, format="json")
    assert_census_schema(json.loads(target.read_text()))
    assert os.listdir(tmp_path) == ["census.json"]
    with open(tmp_path / "census.txt", "w") as stream:
        kname.report(stream)
    assert (tmp_path / "census.txt").read_text().startswith("kname census: ")


# --- where a census may be written (item 1: never replace a device, a FIFO or a link) ---------


@pytest.mark.slow
@pytest.mark.parametrize("rank", [None, "1"])
def test_kname_report_never_writes_through_a_symlink(kname_venv: Venv, app, rank) -> None:
    """A link planted at KNAME_REPORT, or at the path kname derives for rank 1 of 2
    (c.rank1.json), in a folder others can write: someone's file stays as it was, and the
    census is refused in one line naming the link's target."""
    (app / "someone").mkdir()
    (app / "someone" / "file.json").write_text("someone's file")
    link = app / ("c.json" if rank is None else "c.rank1.json")
    link.symlink_to("someone/file.json")
    env = {"KNAME_REPORT": "c.json"}
    if rank is not None:
        env.update(SLURM_PROCID=rank, SLURM_STEP_NUM_TASKS="2")
    result = run_app(kname_venv, app, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"kname: KNAME_REPORT={str(link)!r} could not be written (OSError: it is a symbolic link "
        "(to 'someone/file.json'); kname writes no file through a link: name the file itself); "
        "the launch census was not saved\n"
    )
    assert (app / "someone" / "file.json").read_text() == "someone's file"
    assert os.readlink(link) == "someone/file.json"


@pytest.mark.slow
def test_each_ranks_census_goes_to_the_host_folder_its_path_names(kname_venv: Venv, app) -> None:
    """The README's multi-node recipe, `prof/{host}/...`: kname makes each host's folder (no
    rank's census is lost to a missing one), and `kname report` merges what the glob finds."""
    (app / "prof").mkdir()
    for rank in ("0", "1"):
        env = {"KNAME_REPORT": "prof/{host}/c.json", "SLURM_PROCID": rank,
               "SLURM_STEP_NUM_TASKS": "2"}  # fmt: skip
        result = run_app(kname_venv, app, env=env)
        assert (result.returncode, result.stderr) == (0, "")
    host = socket.gethostname()
    assert sorted(os.listdir(app / "prof" / host)) == ["c.rank0.json", "c.rank1.json"]
    assert (app / "prof" / host).stat().st_mode & 0o077 == 0  # kname's folder is private
    files = sorted(str(path.relative_to(app)) for path in app.glob("prof/*/c.rank*.json"))
    report = kname_venv.python_run("-m", "kname", "report", *files, cwd=app)
    assert report.returncode == 0, report.stderr
    assert f"(prof/{host}/c.rank0.json + prof/{host}/c.rank1.json, written" in report.stdout
    assert "2 ranks): 14 launches" in report.stdout


@pytest.mark.slow
def test_kname_report_to_a_fifo_without_reader_is_one_line(kname_venv: Venv, app) -> None:
    os.mkfifo(app / "fifo")
    result = run_app(kname_venv, app, env={"KNAME_REPORT": "fifo", "APP_EXIT": "3"})
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "census was not saved" in lines[0] and "no reader" in lines[0]
    assert (app / "fifo").is_fifo()


# --- children's censuses (item 24): every worker's file is written, and they merge ----------

POOL_APP = kernels.program(
    """\
import multiprocessing
import os
import sys


def work(n):
    out = np.zeros(4)
    for _ in range(n):
        inc[1, 4](out)  # worker-line
    return int(out[0])


if __name__ == "__main__":
    method, ending = sys.argv[1:]
    context = multiprocessing.get_context(method)
    if ending == "process":  # a plain Process: multiprocessing ends it with os._exit
        children = [context.Process(target=work, args=(n,)) for n in (4, 6)]
        for child in children:
            child.start()
        for child in children:
            child.join()
        assert [child.exitcode for child in children] == [0, 0]
    elif ending == "terminate":  # `with Pool()` terminates its workers with SIGTERM
        with context.Pool(2) as pool:
            assert pool.map(work, [1, 2, 3, 4], chunksize=1) == [1, 2, 3, 4]
    else:  # close and join: the workers end their loop and os._exit
        pool = context.Pool(2)
        assert pool.map(work, [1, 2, 3, 4], chunksize=1) == [1, 2, 3, 4]
        pool.close()
        pool.join()
""",
    kernels.INC,
)


ENDINGS = ["terminate", "close", "process"]


@pytest.mark.slow
@pytest.mark.parametrize("ending", ENDINGS)
def test_every_forked_multiprocessing_child_writes_its_census(
    kname_venv: Venv, tmp_path: Path, ending: str
) -> None:
    """A forked child starts with its parent's launch counters and caches, in C or in Python."""
    check_children_write_their_censuses(kname_venv, tmp_path, "fork", ending)


@pytest.mark.slow
@pytest.mark.any_hot_path
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("ending", ENDINGS)
def test_every_spawned_multiprocessing_child_writes_its_census(
    kname_venv: Venv, tmp_path: Path, method: str, ending: str
) -> None:
    """A new interpreter: its hot path is chosen anew, as in any process (the census tests
    above count on each); what is checked is that each ending still writes the census."""
    check_children_write_their_censuses(kname_venv, tmp_path, method, ending)


def check_children_write_their_censuses(
    kname_venv: Venv, tmp_path: Path, method: str, ending: str
) -> None:
    (tmp_path / "pool_app.py").write_text(POOL_APP)
    env = {"KNAME": "1", "NUMBA_ENABLE_CUDASIM": "1", "KNAME_REPORT": "c.json", **NOT_BENEATH}
    result = kname_venv.python_run("pool_app.py", method, ending, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    owner = load(str(tmp_path / "c.json"))
    assert owner["total_launches"] == 0  # the parent launched nothing itself
    children = [load(str(path)) for path in tmp_path.glob("c.pid*.json")]
    merged = merge_documents(children)
    name = f"work pool_app.py:{line_of(POOL_APP, 'worker-line')}"
    assert [(s["name"], s["launches"]) for s in merged["sites"]] == [(name, 10)]
    # Not one lost: every child that launched has a file (a Pool may give one worker all tasks).
    assert 1 <= len(children) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_childs_names_at_depth_3_are_of_its_own_stack_however_it_started(
    kname_venv: Venv, tmp_path: Path, method: str
) -> None:
    """Forked, a child's stack goes on into its parent's (`p.start()`); spawned, into spawn's
    `<string>` entry: neither is the child's, so its names are the same either way."""
    (tmp_path / "pool_app.py").write_text(POOL_APP)
    env = {"KNAME": "1", "NUMBA_ENABLE_CUDASIM": "1", "KNAME_REPORT": "c.json", **NOT_BENEATH}
    env["KNAME_DEPTH"] = "3"
    result = kname_venv.python_run("pool_app.py", method, "process", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    merged = merge_documents([load(str(path)) for path in tmp_path.glob("c.pid*.json")])
    name = f"work pool_app.py:{line_of(POOL_APP, 'worker-line')}"
    assert [(s["name"], s["launches"]) for s in merged["sites"]] == [(name, 10)]


@pytest.mark.slow
def test_each_table_on_stderr_says_which_process_and_rank_it_is(
    kname_venv: Venv, tmp_path: Path
) -> None:
    """KNAME_REPORT=- in a program with children: a table per process, all on one stderr."""
    (tmp_path / "pool_app.py").write_text(POOL_APP)
    env = {"KNAME": "1", "NUMBA_ENABLE_CUDASIM": "1", "KNAME_REPORT": "-", **NOT_BENEATH}
    env |= {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}  # rank 1 of a job of two
    result = kname_venv.python_run("pool_app.py", "fork", "process", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    headings = [line for line in result.stderr.splitlines() if line.startswith("kname census")]
    found = [
        re.fullmatch(r"kname census of process (\d+) \(rank 1 of 2\): .*", h) for h in headings
    ]
    assert all(found), headings
    # The parent (which launched nothing) and its two children, each once.
    assert len({match.group(1) for match in found if match}) == len(headings) == 3


SIGTERM_APP = kernels.program(
    """\
import signal
import sys
import time

out = np.zeros(4)
for _ in range(3):
    inc[1, 4](out)  # launch-line
if sys.argv[1:] == ["own-handler"]:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("ready", flush=True)
time.sleep(60)
""",
    kernels.INC,
)


@pytest.mark.slow
@pytest.mark.parametrize("handler", ["default", "own-handler"])
def test_a_program_ended_by_sigterm_still_writes_its_census(
    kname_venv: Venv, tmp_path: Path, handler: str
) -> None:
    import signal
    import subprocess

    (tmp_path / "app.py").write_text(SIGTERM_APP)
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env.pop("PYTHONPATH", None)
    env.update(KNAME="1", NUMBA_ENABLE_CUDASIM="1", KNAME_REPORT="c.json", **NOT_BENEATH)
    with subprocess.Popen(
        [str(kname_venv.python), "app.py", handler], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as program:  # fmt: skip
        assert program.stdout.readline() == "ready\n"
        program.send_signal(signal.SIGTERM)
        _, stderr = program.communicate(timeout=60)
    # Killed by SIGTERM as before, or ended by the program's own handler: kname kept out of it.
    assert program.returncode == (-signal.SIGTERM if handler == "default" else 7), stderr
    assert stderr == ""
    document = load(str(tmp_path / "c.json"))
    name = f"<module> app.py:{line_of(SIGTERM_APP, 'launch-line')}"
    assert [(s["name"], s["launches"]) for s in document["sites"]] == [(name, 3)]


# --- a signal during the exit write (item 4): the census is whole, nothing is left beside it --

SIGNAL_APP = """\
import atexit
import os
import signal
import sys

import gpu

name, at, sites = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
source = "".join(f"def site_{i}():\\n    gpu.launch({i})\\n" for i in range(sites))
space = {"gpu": gpu}
exec(compile(source, "sites.py", "exec"), space)
for i in range(sites):
    space[f"site_{i}"]()

FILE_CALLS = ("open", "os.chmod", "os.link", "os.rename", "os.remove", "fcntl.flock")
moments = 0
exiting = False


def on_file_call(event, args):
    # At the AT-th file-system call of the exit, the program signals itself: it lands right there.
    global moments
    if exiting and event in FILE_CALLS:
        moments += 1
        if moments == at:
            os.write(1, f"sent at {event}\\n".encode())
            os.kill(os.getpid(), getattr(signal, name))


def last_callback():
    # Registered after kname's exit writer, so atexit runs it just before the census write.
    global exiting
    exiting = True
    os.write(1, b"exiting\\n")


atexit.register(last_callback)
sys.addaudithook(on_file_call)
"""
GPU = "def launch(*args):\n    return args\n"


def start_signal_app(venv: Venv, app: Path, *args: object) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env.pop("PYTHONPATH", None)
    env.update(KNAME="1", KNAME_TARGETS="gpu:launch", KNAME_REPORT="c.json", **NOT_BENEATH)
    return subprocess.Popen(
        [str(venv.python), "signal_app.py", *map(str, args)], cwd=app, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def beside_the_census(app: Path) -> list[str]:
    """What a write may leave beside c.json: its temporary files."""
    return sorted(p.name for p in app.iterdir() if p.name.startswith(".c.json"))


@pytest.fixture
def signal_app(tmp_path: Path) -> Path:
    (tmp_path / "signal_app.py").write_text(SIGNAL_APP)
    (tmp_path / "gpu.py").write_text(GPU)
    return tmp_path


def earlier_census(app: Path) -> dict:
    """A census left by an earlier run, which the write replaces (and nothing beside it)."""
    for left in beside_the_census(app):
        (app / left).unlink()
    document = {"kname": "0.0.1", "schema": 1, "total_launches": 1, "sites": [
        {"name": "old app.py:1", "kernel": "k", "lib": "x", "launches": 1, "share": 1.0,
         "order": 1}]}  # fmt: skip
    (app / "c.json").write_text(json.dumps(document))
    return document


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_signal_at_any_moment_of_the_exit_write_leaves_the_census_whole(
    kname_venv: Venv, signal_app: Path, name: str
) -> None:
    """SIGINT at any moment of the census write at exit: the write finishes, with no traceback
    and the program's exit status; SIGTERM: it finishes, then the process dies of SIGTERM;
    SIGKILL: the earlier census or the new one, whole. Nothing is left beside it, except after
    a SIGKILL between the two system calls that put the finished file in place."""
    import signal

    sites = 40
    for at in range(1, 30):
        earlier = earlier_census(signal_app)
        with start_signal_app(kname_venv, signal_app, name, at, sites) as program:
            out, err = program.communicate(timeout=120)
        sent = out.startswith("exiting\nsent at ")
        assert err == "", (at, err)
        assert program.returncode == (-getattr(signal, name) if sent and name != "SIGINT" else 0)
        document = load(str(signal_app / "c.json"))
        if name != "SIGKILL" or document != earlier:
            assert document["total_launches"] == sites, (at, out)
            assert len(document["sites"]) == sites
        left = beside_the_census(signal_app)
        if name == "SIGKILL" and out.endswith("sent at os.rename\n"):
            # Killed between link and rename: at most the finished census, under a .tmp name.
            assert len(left) <= 1 and all(
                load(str(signal_app / p))["total_launches"] == sites for p in left
            )
        else:
            assert left == [], (at, out)
        if not sent:
            break
    else:
        pytest.fail("the program never ended without the signal")


@pytest.mark.slow
@pytest.mark.any_hot_path
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_sent_from_outside_during_a_large_census_write_leaves_it_whole(
    kname_venv: Venv, signal_app: Path, name: str
) -> None:
    """A census of many call sites (megabytes), signalled from outside at delays into its write:
    the write is the same code on both hot paths (the test above runs on each)."""
    import signal

    sites = 15_000
    for delay in (0, 0.01, 0.03, 0.1, 0.3):
        earlier_census(signal_app)
        with start_signal_app(kname_venv, signal_app, name, 0, sites) as program:
            assert program.stdout.readline() == "exiting\n"
            time.sleep(delay)
            program.send_signal(getattr(signal, name))
            _, err = program.communicate(timeout=120)
        # It may land in an exit callback of Python's own that runs before kname's (logging's
        # shutdown): that traceback is not kname's, and is there without kname too.
        assert "kname" not in err, (delay, err)
        # 0: it came after the writes; killed by it: after Python put its default action back,
        # as the interpreter shut down (it would have been without kname too).
        assert program.returncode in (0, -getattr(signal, name)), delay
        document = load(str(signal_app / "c.json"))
        assert document["total_launches"] == len(document["sites"]) == sites, delay
        assert beside_the_census(signal_app) == [], delay


# --- unrelated processes that share one KNAME_REPORT (item 3): none is lost, none silently --

TOGETHER_APP = """\
import os
import sys
import time

import gpu

me, everyone = int(sys.argv[1]), int(sys.argv[2])
for _ in range(me):
    gpu.launch()
# Every process runs until all have started: their runs overlap, as a job's ranks do.
open(f"started.{me}", "w").close()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    if sum(name.startswith("started.") for name in os.listdir(".")) == everyone:
        break
    time.sleep(0.01)
"""


def start_together(venv: Venv, app: Path, me: int, everyone: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not cleaned(k)}
    env.pop("PYTHONPATH", None)
    env.update(KNAME="1", KNAME_TARGETS="gpu:launch", KNAME_REPORT="c.json", **NOT_BENEATH)
    return subprocess.Popen(
        [str(venv.python), "together_app.py", str(me), str(everyone)], cwd=app, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture
def together_app(tmp_path: Path) -> Path:
    (tmp_path / "together_app.py").write_text(TOGETHER_APP)
    (tmp_path / "gpu.py").write_text(GPU)
    return tmp_path


@pytest.mark.slow
def test_unrelated_processes_sharing_kname_report_each_keep_their_census(
    kname_venv: Venv, together_app: Path
) -> None:
    """Six processes started apart (not beneath one another), one KNAME_REPORT: the first to
    finish writes it, each other writes its own file beside it and says so in one line."""
    programs = [start_together(kname_venv, together_app, me, 6) for me in range(1, 7)]
    said = {}
    for me, program in enumerate(programs, 1):
        _, said[me] = program.communicate(timeout=120)
        assert program.returncode == 0, said[me]
    owner = load(str(together_app / "c.json"))
    (first,) = [me for me in said if said[me] == ""]
    assert owner["total_launches"] == first
    census = together_app / "c.json"
    for me, program in enumerate(programs, 1):
        if me == first:
            continue
        own = together_app / f"c.pid{program.pid}.json"
        assert said[me] == (
            f"kname: another process wrote {census} while this one ran; this process's launch "
            f"census (KNAME_REPORT) is in {own} instead\n"
        )
        assert load(str(own))["total_launches"] == me
    assert len(list(together_app.glob("c.pid*.json"))) == 5
    assert beside_the_census(together_app) == []


@pytest.mark.slow
def test_a_census_left_by_an_earlier_run_is_replaced_without_a_word(
    kname_venv: Venv, together_app: Path
) -> None:
    for me in (2, 3):
        with start_together(kname_venv, together_app, me, 1) as program:
            _, err = program.communicate(timeout=120)
        assert (program.returncode, err) == (0, "")
        (together_app / f"started.{me}").unlink()
    assert load(str(together_app / "c.json"))["total_launches"] == 3
    assert list(together_app.glob("c.pid*.json")) == []
