"""Saved documents on disk: reading one (a fault of any kind is one line naming the file), and
writing one atomically (never half-written; a device or a FIFO kept what it is; never through a
link)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from support import REPO
from support.profile_streams import census_of, profile_of

from kname.documents.build import profile_document
from kname.documents.files import identity, load, write_atomically, written_here
from kname.documents.schema import (
    CENSUS_SCHEMA,
    PROFILE_SCHEMA,
    PYTEST_REPORT,
    DocumentError,
    render_json,
)
from kname.pytest_plugin import write_report


def test_load_says_what_is_wrong_with_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"schema": 1,')
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    messages = {}
    for name in ("missing.json", "bad.json", "binary.json"):
        with pytest.raises(DocumentError) as raised:
            load(str(tmp_path / name))
        messages[name] = str(raised.value)
    assert messages["missing.json"].endswith("missing.json: no such file")
    assert "bad.json: not valid JSON (Expecting" in messages["bad.json"]
    assert "line 1, column 14" in messages["bad.json"]
    assert "binary.json: cannot be read" in messages["binary.json"]


def test_load_reads_each_kind_only_where_asked(tmp_path: Path) -> None:
    """One reader for every saved file (kname report, the pytest plugin, the tests): censuses,
    profiles, and the pytest plugin's report where asked."""
    census = tmp_path / "census.json"
    census.write_text(render_json(census_of({("step app.py:1", "axpy"): 2})))
    report = tmp_path / "tests.json"
    write_report(str(report), {"t.py::test": {"outcome": "passed", **census_of({})}})
    assert load(str(census))["schema"] == CENSUS_SCHEMA
    assert load(str(report), (CENSUS_SCHEMA, PYTEST_REPORT))["report"] == PYTEST_REPORT
    assert load(str(report), (PYTEST_REPORT,))["tests"]["t.py::test"]["total_launches"] == 0
    with pytest.raises(DocumentError, match=r"tests\.json: not a kname census"):
        load(str(report))
    with pytest.raises(DocumentError, match=r"census\.json: not a kname test report"):
        load(str(census), (PYTEST_REPORT,))
    with pytest.raises(DocumentError, match="census schema 1 is not supported"):
        load(str(census), (PROFILE_SCHEMA, PYTEST_REPORT))


def test_no_module_but_files_reads_a_saved_file() -> None:
    """`kname report` had its own loader beside files.load (#37): read_json is files.load's."""
    callers = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in (REPO / "kname").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "read_json"
    ]
    assert callers == ["kname/documents/files.py:" + str(_line_of_read_json_in_load())]


def _line_of_read_json_in_load() -> int:
    source = (REPO / "kname" / "documents" / "files.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if "value = read_json(path)" in line)


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
    with pytest.raises(DocumentError) as raised:
        load(str(tmp_path / "hostile.json"))
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'hostile.json'}: not valid JSON (")
    assert fault in message and "\n" not in message


def test_load_reads_either_schema(tmp_path):
    census_path = tmp_path / "census.json"
    census = census_of({("main app.py:22", "axpy"): 3})
    census_path.write_text(render_json(census))
    profile_path = tmp_path / "profile.json"
    document = profile_document(profile_of({"main app.py:22": ("axpy", 3, 30)}))
    profile_path.write_text(render_json(document))
    assert load(str(census_path))["schema"] == 1
    assert load(str(profile_path)) == document


def test_files_that_are_not_documents_are_one_line(tmp_path):
    (tmp_path / "text.json").write_text("{not json")
    for name, message in [("missing.json", "no such file"), ("text.json", "not valid JSON")]:
        with pytest.raises(DocumentError, match=message):
            load(str(tmp_path / name))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(DocumentError, match="not a kname census"):
        load(str(tmp_path / "list.json"))
    assert PROFILE_SCHEMA == 2


@pytest.fixture(params=["unnamed", "named"])
def temporary_files(request, monkeypatch) -> str:
    """Write through an unnamed file (O_TMPFILE, where Linux has it) or, as on a file system
    without them, through a named one."""
    if request.param == "named":
        monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    elif not hasattr(os, "O_TMPFILE"):
        pytest.skip("no O_TMPFILE on this system")
    return request.param


def test_write_atomically_leaves_no_temporary_file_when_it_fails(
    tmp_path: Path, temporary_files: str
) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(OSError):
        write_atomically(str(tmp_path / "taken"), "{}")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(str(tmp_path / "census.json"), "\udc80")
    with pytest.raises(OSError):
        write_atomically(str(tmp_path / "missing" / "census.json"), "{}")
    assert os.listdir(tmp_path) == ["taken"]


def test_write_atomically_replaces_a_file_whole_and_knows_what_it_wrote(
    tmp_path: Path, temporary_files: str
) -> None:
    target = tmp_path / "census.json"
    target.write_text("old")
    target.chmod(0o604)
    write_atomically(str(target), "new ✓\n")
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    assert target.stat().st_mode & 0o777 == 0o604
    assert os.listdir(tmp_path) == ["census.json"]
    assert written_here(str(target)) == identity(str(target)) is not None
    target.write_text("changed by someone else")
    assert written_here(str(target)) != identity(str(target))


# --- where a census may be written (item 1: never replace a device, a FIFO or a link) ---------


def make_char_device(path: Path, minor: int) -> Path:
    """A private copy of /dev/null (minor 3) or /dev/full (minor 7); needs root."""
    import stat

    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, AttributeError):
        pytest.skip("creating a character device needs root")
    return path


@pytest.mark.parametrize("target", ["real.json", "sub/new.json", "/etc/passwd-of-someone"])
def test_write_atomically_never_writes_through_a_symlink(tmp_path: Path, target: str) -> None:
    """A link planted at the path (in a shared folder, by anyone) must not make kname replace
    the file it points to, whoever owns it, nor create a dangling link's target: refused, with
    the link's target named, and everything left as it was."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "real.json").write_text("someone's file")
    (tmp_path / "latest.json").symlink_to(target)
    with pytest.raises(OSError) as raised:
        write_atomically(str(tmp_path / "latest.json"), "{}\n")
    assert str(raised.value) == (
        f"[Errno 40] it is a symbolic link (to {target!r}); kname writes no file through a "
        "link: name the file itself"
    )
    assert os.readlink(tmp_path / "latest.json") == target
    assert (tmp_path / "real.json").read_text() == "someone's file"
    assert sorted(os.listdir(tmp_path)) == ["latest.json", "real.json", "sub"]
    assert os.listdir(tmp_path / "sub") == []


def test_a_symlink_is_no_file_kname_knows(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("someone's file")
    (tmp_path / "latest.json").symlink_to("real.json")
    assert identity(str(tmp_path / "latest.json")) is None
    assert identity(str(tmp_path / "real.json")) is not None


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


def test_a_dash_names_no_file_to_write(tmp_path: Path, monkeypatch) -> None:
    """`-` has one meaning (KNAME_REPORT's table on stderr): a page, a trace or a saved file
    asked at `-` is refused, never a file named `-` (kname report --html -, kname.report("-"),
    a session's save("-"))."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OSError, match="'-' names no file"):
        write_atomically("-", "text")
    assert not (tmp_path / "-").exists()
