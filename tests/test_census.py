"""The launch census: kname.report() as a table and as JSON, and KNAME_REPORT at exit.

Counting runs for real: numba kernels on the CUDA simulator, in a subprocess of a venv with
kname's wheel installed. Rendering, validation and comparison are also checked in-process, on
censuses built by hypothesis.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import Venv, cleaned, line_of
from support.nvtx_capture import run_captured

import kname
from kname.census_file import (
    OWNER_VARIABLE,
    CensusError,
    compare,
    load,
    render_diff,
    render_json,
    render_table,
    validate,
    write_atomically,
)
from kname.profiling.document import merge_documents

APP = """\
import os
import sys

import numpy as np
from numba import cuda

import kname


@cuda.jit
def axpy(out, a, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + out[i]


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
"""

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
    assert set(document) == {"kname", "schema", "sites", "total_launches"}
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
    assert result.stderr == table


@pytest.mark.slow
def test_kname_report_path_writes_the_json_census_atomically(kname_venv: Venv, app) -> None:
    result = run_app(kname_venv, app, env={"KNAME_REPORT": "census.json"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == result.stderr == ""
    document = json.loads((app / "census.json").read_text())
    assert_census_schema(document)
    assert document["sites"] == expected_sites()
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


# --- rendering, validation, comparison ----------------------------------------------------

call_site_names = st.builds(
    "{} {}.py:{}".format,
    st.sampled_from(["<module>", "step", "main", "Solver.run"]),
    st.sampled_from(["app", "solver", "pkg/ops", "naïve/ünïcode"]),
    st.integers(1, 5000),
)
site_counts = st.dictionaries(
    st.tuples(call_site_names, st.sampled_from(["axpy", "scale", "reduce", ""])),
    st.integers(1, 10**9),
    max_size=12,
)


def census_of(counts: dict[tuple[str, str], int]) -> dict:
    total = sum(counts.values())
    sites = [
        {"name": name, "kernel": kernel, "lib": "numba", "launches": launches,
         "share": round(launches / total, 6), "order": order}
        for order, ((name, kernel), launches) in enumerate(counts.items(), 1)
    ]  # fmt: skip
    return {"kname": kname.__version__, "schema": 1, "sites": sites, "total_launches": total}


@given(site_counts)
def test_render_json_reads_back_as_the_same_valid_census(counts) -> None:
    document = census_of(counts)
    text = render_json(document)
    assert text.endswith("}\n")
    assert json.loads(text) == document
    assert validate(json.loads(text), "x.json") == document


@given(site_counts, site_counts)
def test_diff_deltas_add_up_to_the_change_in_total_launches(before, after) -> None:
    old, new = census_of(before), census_of(after)
    changes = compare(old, new)
    assert sum(c.after - c.before for c in changes) == new["total_launches"] - old["total_launches"]
    assert all(c.before != c.after for c in changes)
    assert {(c.name, c.kernel) for c in changes if c.kind == "added"} == set(after) - set(before)
    assert {(c.name, c.kernel) for c in changes if c.kind == "removed"} == set(before) - set(after)
    assert compare(old, old) == []


GOOD = census_of({("step app.py:3", "axpy"): 2})


def shifted(counts: dict[tuple[str, str], int], by: int) -> dict[tuple[str, str], int]:
    """The same census after every line of every file moved down by `by`."""
    moved = {}
    for (name, kernel), launches in counts.items():
        where, line = name.rsplit(":", 1)
        key = (f"{where}:{int(line) + by}", kernel)
        moved[key] = moved.get(key, 0) + launches
    return moved


@given(site_counts, st.integers(1, 50))
def test_a_line_shift_is_no_change_when_lines_are_ignored(counts, by) -> None:
    before, after = census_of(counts), census_of(shifted(counts, by))
    assert compare(before, after, ignore_lines=True) == []
    assert (compare(before, after) == []) == (not counts)


@given(site_counts, site_counts)
def test_ignoring_lines_compares_launches_per_function_file_and_kernel(before, after) -> None:
    def per_function(counts):
        summed = {}
        for (name, kernel), launches in counts.items():
            key = (name.rsplit(":", 1)[0] + ":*", kernel)
            summed[key] = summed.get(key, 0) + launches
        return summed

    changes = compare(census_of(before), census_of(after), ignore_lines=True)
    old, new = per_function(before), per_function(after)
    assert {(c.name, c.kernel): (c.before, c.after) for c in changes} == {
        key: (old.get(key, 0), new.get(key, 0))
        for key in {*old, *new}
        if old.get(key, 0) != new.get(key, 0)
    }


def test_ignoring_lines_masks_every_line_of_a_deep_name_but_keeps_the_file() -> None:
    before = census_of({("step a.py:12 < main b.py:40", "k"): 1, ("step <cell 3>:5", "k"): 2})
    after = census_of({("step a.py:13 < main b.py:41", "k"): 1, ("step <cell 4>:5", "k"): 2})
    assert [(c.kind, c.name) for c in compare(before, after, ignore_lines=True)] == [
        ("added", "step <cell 4>:*"),
        ("removed", "step <cell 3>:*"),
    ]


@pytest.mark.parametrize(
    ("document", "fault"),
    [
        ([], "not a kname census"),
        ({"schema": 1}, "not a kname census"),
        ({**GOOD, "schema": 2}, "census schema 2 is not supported"),
        ({**GOOD, "sites": {}}, "'sites' must be a list"),
        ({**GOOD, "sites": [{"name": "x"}]}, "sites[0] has no 'kernel'"),
        ({**GOOD, "sites": [{**GOOD["sites"][0], "launches": -1}]}, "sites[0].launches"),
        ({**GOOD, "sites": [{**GOOD["sites"][0], "launches": True}]}, "sites[0].launches"),
        ({**GOOD, "sites": [{**GOOD["sites"][0], "share": 1.5}]}, "sites[0].share"),
        ({**GOOD, "total_launches": "2"}, "'total_launches' must be a whole number"),
    ],
)
def test_validate_names_the_file_and_the_fault_on_one_line(document, fault) -> None:
    with pytest.raises(CensusError) as raised:
        validate(document, "census.json")
    message = str(raised.value)
    assert message.startswith("census.json: ") and fault in message
    assert "\n" not in message


def test_load_says_what_is_wrong_with_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"schema": 1,')
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    messages = {}
    for name in ("missing.json", "bad.json", "binary.json"):
        with pytest.raises(CensusError) as raised:
            load(str(tmp_path / name))
        messages[name] = str(raised.value)
    assert messages["missing.json"].endswith("missing.json: no such file")
    assert "bad.json: not valid JSON (Expecting" in messages["bad.json"]
    assert "line 1, column 14" in messages["bad.json"]
    assert "binary.json: cannot be read" in messages["binary.json"]


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        (
            '{"schema": 1, "sites": [], "total_launches": ' + "7" * 5000 + "}",
            "a number has more than 4300 digits",
        ),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"schema": 1, "sites": [{"name": ' * 50_000, "nested too deeply"),
    ],
)
def test_load_of_a_hostile_file_is_one_census_error(tmp_path: Path, text, fault) -> None:
    (tmp_path / "hostile.json").write_text(text)
    with pytest.raises(CensusError) as raised:
        load(str(tmp_path / "hostile.json"))
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'hostile.json'}: not valid JSON (")
    assert fault in message and "\n" not in message


def test_tables_and_diffs_escape_what_a_terminal_would_obey() -> None:
    hostile = census_of({("step \x1b[2J a.py:1", "ax\x00py"): 2, ("ok \ud800 b.py:2", "k"): 1})
    table = render_table(hostile, source="evil\x1b[31m.json")
    diff = render_diff(GOOD, hostile, ("a\x07.json", "b.json"))
    for text in (table, diff):
        assert all(line.isprintable() for line in text.splitlines()), text
    assert "step \\x1b[2J a.py:1" in table and "ax\\x00py" in table and "\\ud800" in table
    assert "evil\\x1b[31m.json" in table
    assert "step \\x1b[2J a.py:1 [ax\\x00py]" in diff and "a\\x07.json" in diff


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


def test_write_atomically_leaves_no_temporary_file_when_it_fails(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(OSError):
        write_atomically(str(tmp_path / "taken"), "{}")
    assert os.listdir(tmp_path) == ["taken"]


# --- where a census may be written (item 1: never replace a device, a FIFO or a link) ---------


def make_char_device(path: Path, minor: int) -> Path:
    """A private copy of /dev/null (minor 3) or /dev/full (minor 7); needs root."""
    import stat

    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, AttributeError):
        pytest.skip("creating a character device needs root")
    return path


def test_write_atomically_follows_a_symlink_and_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("stale")
    (tmp_path / "real.json").chmod(0o640)
    (tmp_path / "latest.json").symlink_to("real.json")
    write_atomically(str(tmp_path / "latest.json"), "{}\n")
    assert (tmp_path / "latest.json").is_symlink()
    assert os.readlink(tmp_path / "latest.json") == "real.json"
    assert (tmp_path / "real.json").read_text() == "{}\n"
    assert (tmp_path / "real.json").stat().st_mode & 0o777 == 0o640  # its mode is kept
    assert sorted(os.listdir(tmp_path)) == ["latest.json", "real.json"]


def test_write_atomically_through_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "latest.json").symlink_to("sub/new.json")
    write_atomically(str(tmp_path / "latest.json"), "{}\n")
    assert (tmp_path / "latest.json").is_symlink()
    assert (tmp_path / "sub" / "new.json").read_text() == "{}\n"


def test_write_atomically_writes_a_character_device_in_place(tmp_path: Path) -> None:
    import stat

    null = make_char_device(tmp_path / "null", 3)
    write_atomically(str(null), "{}\n")
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert os.listdir(tmp_path) == ["null"]


def test_write_atomically_to_a_full_device_fails_and_keeps_it(tmp_path: Path) -> None:
    import stat

    full = make_char_device(tmp_path / "full", 7)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(str(full), "{}\n")
    assert stat.S_ISCHR(full.lstat().st_mode)
    assert os.listdir(tmp_path) == ["full"]


def test_write_atomically_writes_a_fifo_in_place_for_its_reader(tmp_path: Path) -> None:
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is waiting
    try:
        write_atomically(str(fifo), '{"x": 1}\n')
        assert os.read(reader, 1000) == b'{"x": 1}\n'
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert os.listdir(tmp_path) == ["fifo"]


def test_write_atomically_to_a_fifo_without_reader_fails_at_once(tmp_path: Path) -> None:
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as raised:  # not a hang, waiting for a reader that never comes
        write_atomically(str(fifo), "{}\n")
    assert "no reader" in str(raised.value)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_write_atomically_appends_to_a_file_reached_through_proc(tmp_path: Path) -> None:
    # /dev/stdout when stdout is a file: the program's output must not be replaced or cut.
    out = tmp_path / "out.txt"
    with open(out, "w") as stream:
        stream.write("program output\n")
        stream.flush()
        write_atomically(f"/proc/self/fd/{stream.fileno()}", "{}\n")
    assert out.read_text() == "program output\n{}\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_write_atomically_refuses_a_socket(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(OSError, match="a socket"):
            write_atomically(str(path), "{}\n")
    finally:
        server.close()
    assert path.is_socket()


@pytest.mark.slow
def test_kname_report_through_a_symlink_updates_its_target(kname_venv: Venv, app) -> None:
    (app / "runs").mkdir()
    (app / "runs" / "real.json").write_text("stale")
    (app / "latest.json").symlink_to("runs/real.json")
    result = run_app(kname_venv, app, env={"KNAME_REPORT": "latest.json"})
    assert result.returncode == 0, result.stderr
    assert (app / "latest.json").is_symlink()
    assert json.loads((app / "runs" / "real.json").read_text())["sites"] == expected_sites()


@pytest.mark.slow
def test_kname_report_to_a_fifo_without_reader_is_one_line(kname_venv: Venv, app) -> None:
    os.mkfifo(app / "fifo")
    result = run_app(kname_venv, app, env={"KNAME_REPORT": "fifo", "APP_EXIT": "3"})
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "census was not saved" in lines[0] and "no reader" in lines[0]
    assert (app / "fifo").is_fifo()


# --- children's censuses (item 24): every worker's file is written, and they merge ----------

POOL_APP = """\
import multiprocessing
import os
import sys

import numpy as np
from numba import cuda


@cuda.jit
def inc(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += 1


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
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("ending", ["terminate", "close", "process"])
def test_every_multiprocessing_child_writes_its_census(
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


SIGTERM_APP = """\
import signal
import sys
import time

import numpy as np
from numba import cuda


@cuda.jit
def inc(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += 1


out = np.zeros(4)
for _ in range(3):
    inc[1, 4](out)  # launch-line
if sys.argv[1:] == ["own-handler"]:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("ready", flush=True)
time.sleep(60)
"""


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
