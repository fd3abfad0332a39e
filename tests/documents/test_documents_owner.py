"""Which process owns the saved files, and the name of a file beside the owner's.

Processes that really start beneath an owner are run in test_census.py (the census) and
test_profiling_mode.py (a profile's files); these are the rules in-process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support import REPO

from kname.documents.owner import (
    OWNER_PATHS_VARIABLE,
    OWNER_RANK_VARIABLE,
    OWNER_VARIABLE,
    beside,
    claim,
    owner_pid,
    write_output,
    write_outputs,
)
from kname.rank_paths import PathTemplateError


def test_beside_tags_the_path_as_a_rank_is_tagged() -> None:
    pid = os.getpid()
    assert beside("out/p.json") == f"out/p.pid{pid}.json"
    assert beside("trace") == f"trace.pid{pid}"  # no suffix made up
    assert beside("p.tar.gz") == f"p.pid{pid}.tar.gz"  # every suffix kept
    assert beside("p.rank3.json") == f"p.rank3.pid{pid}.json"  # after the rank


@pytest.mark.parametrize("inherited", [None, "", "12x", "²"])
def test_the_first_process_to_ask_owns_the_files_and_marks_itself(monkeypatch, inherited) -> None:
    # Set first, so that monkeypatch puts back what was there (or nothing) after owner_pid()'s mark.
    monkeypatch.setenv(OWNER_VARIABLE, inherited or "")
    if inherited is None:
        monkeypatch.delenv(OWNER_VARIABLE)
    assert owner_pid() == os.getpid()
    assert os.environ[OWNER_VARIABLE] == str(os.getpid())


def test_a_process_beneath_an_owner_keeps_its_mark(monkeypatch) -> None:
    monkeypatch.setenv(OWNER_VARIABLE, "1")
    assert owner_pid() == 1
    assert os.environ[OWNER_VARIABLE] == "1"


def beneath_owner(monkeypatch, *paths, rank: str = "") -> None:
    """This process was started beneath an owner (pid 1) of `paths`: it inherited the mark."""
    monkeypatch.setenv(OWNER_VARIABLE, "1")
    monkeypatch.setenv(OWNER_RANK_VARIABLE, rank)
    monkeypatch.setenv(OWNER_PATHS_VARIABLE, json.dumps([str(path) for path in paths]))


def test_the_mark_is_for_the_paths_it_was_made_for(tmp_path, monkeypatch, capsys) -> None:
    """A child given a KNAME_REPORT of its own (not the one it inherited) owns that path: it
    writes it in place, and marks itself, for that path, for its own children."""
    beneath_owner(monkeypatch, tmp_path / "a.json")
    assert claim(str(tmp_path / "a.json")).owner == 1
    output = claim(str(tmp_path / "b.json"))
    assert output.owner == os.getpid()
    assert write_output(output, "its own", "census") == str(tmp_path / "b.json")
    assert os.listdir(tmp_path) == ["b.json"] and capsys.readouterr().err == ""
    assert json.loads(os.environ[OWNER_PATHS_VARIABLE]) == [str(tmp_path / "b.json")]
    # Its other outputs (a profile's page) join the mark: its children write beside them.
    assert claim(str(tmp_path / "b.html")).owner == os.getpid()
    assert json.loads(os.environ[OWNER_PATHS_VARIABLE]) == [
        str(tmp_path / "b.json"), str(tmp_path / "b.html")
    ]  # fmt: skip


# --- one path, several processes: claim() at start, write_output() at the end -----------------


@pytest.fixture
def owner(monkeypatch) -> int:
    """This process owns the outputs (monkeypatch takes the paths it marks away after)."""
    monkeypatch.setenv(OWNER_VARIABLE, str(os.getpid()))
    monkeypatch.setenv(OWNER_PATHS_VARIABLE, "[]")
    return os.getpid()


def test_a_file_left_by_an_earlier_run_is_replaced_without_a_word(tmp_path, owner, capsys):
    (tmp_path / "c.json").write_text("earlier run")
    output = claim(str(tmp_path / "c.json"))
    assert write_output(output, "this run", "census") == str(tmp_path / "c.json")
    assert (tmp_path / "c.json").read_text() == "this run"
    assert capsys.readouterr().err == ""
    # Its own file, written again (a second write at exit, or kname.report(path)): still its own.
    assert write_output(output, "again", "census") == str(tmp_path / "c.json")
    assert os.listdir(tmp_path) == ["c.json"]


@pytest.mark.parametrize("before", ["none", "earlier run"])
def test_a_file_another_process_wrote_meanwhile_is_kept_and_this_one_goes_beside_it(
    tmp_path, owner, capsys, before
) -> None:
    if before != "none":
        (tmp_path / "c.json").write_text(before)
    output = claim(str(tmp_path / "c.json"))
    (tmp_path / "c.json").write_text("another process's")
    written = write_output(output, "this run", "launch census (KNAME_REPORT)")
    assert written == str(tmp_path / f"c.pid{owner}.json")
    assert (tmp_path / "c.json").read_text() == "another process's"
    assert (tmp_path / f"c.pid{owner}.json").read_text() == "this run"
    assert capsys.readouterr().err == (
        f"kname: another process wrote {tmp_path / 'c.json'} while this one ran; this process's "
        f"launch census (KNAME_REPORT) is in {written} instead\n"
    )


def test_a_profile_and_its_page_stay_together_when_another_process_took_one(
    tmp_path, owner, capsys
) -> None:
    """Two processes ending together, each writing its profile and then its page: had each
    file been decided alone, one process could take the profile and the other the page. Here
    another process took only the profile: this one's page goes beside it too."""
    profile, page = claim(str(tmp_path / "p.json")), claim(str(tmp_path / "p.html"))
    (tmp_path / "p.json").write_text("another process's")
    written = write_outputs(
        [(profile, lambda: "this profile", "profile"), (page, lambda: "this page", "page")]
    )
    assert written == [str(tmp_path / f"p.pid{owner}.json"), str(tmp_path / f"p.pid{owner}.html")]
    assert sorted(os.listdir(tmp_path)) == ["p.json", f"p.pid{owner}.html", f"p.pid{owner}.json"]
    assert capsys.readouterr().err == (
        f"kname: another process wrote {tmp_path / 'p.json'} while this one ran; this process's "
        f"profile is in {written[0]} instead\n"
        f"kname: this process's page is in {written[1]}, beside its other files, not "
        f"{tmp_path / 'p.html'}\n"
    )


def test_an_output_that_cannot_be_made_is_told_and_the_others_are_written(tmp_path, owner):
    profile, page = claim(str(tmp_path / "p.json")), claim(str(tmp_path / "p.html"))
    failures = []

    def broken() -> str:
        raise ValueError("no page")

    written = write_outputs(
        [(profile, lambda: "this profile", "profile"), (page, broken, "page")],
        failed=lambda output, error: failures.append((output.path, str(error))),
    )
    assert written == [str(tmp_path / "p.json"), None]
    assert failures == [(str(tmp_path / "p.html"), "no page")]
    assert os.listdir(tmp_path) == ["p.json"]


def test_a_process_beneath_the_owner_writes_beside_it_without_a_word(tmp_path, monkeypatch, capsys):
    beneath_owner(monkeypatch, tmp_path / "c.json")
    output = claim(str(tmp_path / "c.json"))
    assert write_output(output, "child", "census") == str(tmp_path / f"c.pid{os.getpid()}.json")
    assert capsys.readouterr().err == ""
    assert os.listdir(tmp_path) == [f"c.pid{os.getpid()}.json"]


@pytest.mark.parametrize("beneath", [False, True])
def test_a_process_that_launched_nothing_writes_nothing_beside_another_processs_file(
    tmp_path, owner, monkeypatch, capsys, beneath
) -> None:
    if beneath:
        beneath_owner(monkeypatch, tmp_path / "c.json")
    output = claim(str(tmp_path / "c.json"))
    assert (output.owner == 1) is beneath
    (tmp_path / "c.json").write_text("another process's")
    assert write_output(output, "nothing launched", "census", launched=False) is None
    assert os.listdir(tmp_path) == ["c.json"]
    assert (tmp_path / "c.json").read_text() == "another process's"
    assert capsys.readouterr().err == ""


def test_an_owner_that_launched_nothing_still_writes_its_own_path(tmp_path, owner) -> None:
    output = claim(str(tmp_path / "c.json"))
    assert write_output(output, "nothing launched", "census", launched=False) == str(
        tmp_path / "c.json"
    )
    assert (tmp_path / "c.json").read_text() == "nothing launched"


@contextlib.contextmanager
def directory_held_by_another(directory) -> Iterator[None]:
    """An flock on `directory`, as any other program may hold one (flock locks belong to an
    open file description: this one stands for another process's)."""
    held = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield
    finally:
        os.close(held)


@pytest.mark.parametrize("another_wrote", [False, True])
def test_a_lock_another_program_holds_on_the_folder_changes_nothing_said_or_written(
    tmp_path, owner, capsys, another_wrote
) -> None:
    """The file goes where it would without the lock, and "another process wrote" is said only
    when one did."""
    output = claim(str(tmp_path / "c.json"))
    if another_wrote:
        (tmp_path / "c.json").write_text("another process's")
    with directory_held_by_another(tmp_path):
        written = write_output(output, "this run", "census")
    mine = tmp_path / (f"c.pid{owner}.json" if another_wrote else "c.json")
    assert written == str(mine) and mine.read_text() == "this run"
    said = capsys.readouterr().err
    assert ("another process wrote" in said) is another_wrote
    assert said.count("\n") == int(another_wrote)


def test_an_output_folder_that_is_a_fifo_is_one_line_never_a_wait(tmp_path) -> None:
    """KNAME_REPORT=fifo/c.json (a typo, or a link into a FIFO): nothing may open the FIFO to
    lock it, which would wait for a writer forever, through the SIGTERM meant to end it."""
    os.mkfifo(tmp_path / "fifo")
    program = (
        "import sys; from kname.documents.owner import claim, write_output\n"
        "try:\n"
        "    write_output(claim(sys.argv[1]), 'text', 'census')\n"
        "except OSError as error:\n"
        "    print(type(error).__name__, error.strerror)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), OWNER_VARIABLE: ""}
    result = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "fifo" / "c.json")],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, "NotADirectoryError Not a directory\n")
    assert (tmp_path / "fifo").is_fifo()


@pytest.mark.parametrize("beneath", [False, True])
def test_a_link_planted_at_a_path_kname_derives_is_never_written_through(
    tmp_path, owner, monkeypatch, beneath
) -> None:
    # The owner's path, and a helper's own file (c.pid<N>.json), guessed by another user.
    if beneath:
        beneath_owner(monkeypatch, tmp_path / "c.json")
    (tmp_path / "theirs.json").write_text("someone's file")
    output = claim(str(tmp_path / "c.json"))
    assert (output.owner == 1) is beneath
    os.symlink(tmp_path / "theirs.json", beside(output.path) if beneath else output.path)
    with pytest.raises(OSError, match="symbolic link"):
        write_output(output, "this run", "census")
    assert (tmp_path / "theirs.json").read_text() == "someone's file"


def test_special_files_are_written_in_place_by_every_process(tmp_path, owner) -> None:
    os.mkfifo(tmp_path / "fifo")
    reader = os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        output = claim(str(tmp_path / "fifo"))
        assert write_output(output, "through the FIFO", "census") == str(tmp_path / "fifo")
        assert os.read(reader, 100) == b"through the FIFO"
    finally:
        os.close(reader)


# --- ranks: each rank owns its own path -------------------------------------------------------


@pytest.fixture
def rank_2_of_4(monkeypatch) -> None:
    """This process is torchrun's worker of rank 2 of 4; no owner marked yet."""
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "2")
    # Set first, so that monkeypatch takes owner_pid()'s marks away after the test.
    monkeypatch.setenv(OWNER_VARIABLE, "")
    monkeypatch.setenv(OWNER_RANK_VARIABLE, "")
    monkeypatch.setenv(OWNER_PATHS_VARIABLE, "")


def test_a_rank_claims_its_own_path(tmp_path, rank_2_of_4) -> None:
    output = claim(str(tmp_path / "p.json"), "KNAME_REPORT")
    assert output.path == str(tmp_path / "p.rank2.json")
    assert claim(str(tmp_path / "{host}" / "p.{rank}.json")).path == str(
        tmp_path / socket.gethostname() / "p.2.json"
    )
    with pytest.raises(PathTemplateError, match=r"^KNAME_REPORT='p\.\{rnak\}\.json' has an"):
        claim("p.{rnak}.json", "KNAME_REPORT")


def test_the_folders_a_placeholder_names_are_made_private_and_no_others(
    tmp_path, rank_2_of_4
) -> None:
    host = socket.gethostname()
    output = claim(str(tmp_path / "prof" / "{host}" / "r{rank}" / "p.json"))
    (tmp_path / "prof").mkdir()
    assert write_output(output, "rank 2's", "profile") == str(
        tmp_path / "prof" / host / "r2" / "p.json"
    )
    for made in (tmp_path / "prof" / host, tmp_path / "prof" / host / "r2"):
        assert made.stat().st_mode & 0o777 == 0o700 & ~current_umask()
    # A folder named as it is (no placeholder) must exist: a typo is one line, not a new tree.
    output = claim(str(tmp_path / "porf" / "{host}" / "p.json"))
    with pytest.raises(FileNotFoundError):
        write_output(output, "rank 2's", "profile")
    assert not (tmp_path / "porf").exists()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_worker_of_another_rank_owns_its_own_files_beneath_a_lone_owner(rank_2_of_4, monkeypatch):
    # A script started the job's processes itself: it owns its files, and each rank its own.
    monkeypatch.setenv(OWNER_VARIABLE, "1")
    assert owner_pid() == os.getpid()
    assert (os.environ[OWNER_VARIABLE], os.environ[OWNER_RANK_VARIABLE]) == (
        str(os.getpid()),
        "torchrun 2/4",
    )


def test_a_helper_process_of_a_rank_writes_beside_that_ranks_file(
    tmp_path, rank_2_of_4, monkeypatch
):
    # A DataLoader worker inherits its rank's variables, and its rank's mark.
    beneath_owner(monkeypatch, tmp_path / "p.rank2.json", rank="torchrun 2/4")
    output = claim(str(tmp_path / "p.json"))
    assert output.owner == 1
    written = write_output(output, "the worker's", "census")
    assert written == str(tmp_path / f"p.rank2.pid{os.getpid()}.json")
