"""`kname run --show-ranges`: kname's own NVTX tool shows the ranges a program really emitted.

Real programs (numba kernels on the simulator) run through the installed `kname` command; what
the viewer prints is checked against the test suite's own NVTX capture of the same program.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import Venv, kernels, line_of
from support.nvtx_capture import run_captured
from test_cli import SIMULATOR, run_kname

from kname import show_ranges

pytestmark = pytest.mark.slow

APP = kernels.program("""\
import multiprocessing
import sys


def step(out, x):
    axpy[1, 4](out, 2.0, x)  # step-line


def main():
    out, x = np.zeros(4), np.ones(4)
    for _ in range(3):
        step(out, x)
    axpy[1, 4](out, 1.0, x)  # main-line
    if "--fork" in sys.argv:
        child = multiprocessing.get_context("fork").Process(target=step, args=(out, x))
        child.start()
        child.join()
    if "--leave-open" in sys.argv:
        import nvtx

        nvtx.push_range("left open", domain="mine")
    print("done")
    sys.exit(4)


main()
""")
STEP = f"step app.py:{line_of(APP, 'step-line')}"
MAIN = f"main app.py:{line_of(APP, 'main-line')}"


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "cache").mkdir()
    return tmp_path


def show(venv: Venv, app: Path, *args: str, env: dict[str, str] | None = None):
    environ = {**SIMULATOR, "XDG_CACHE_HOME": str(app / "cache"), **(env or {})}
    return run_kname(venv, "run", "--show-ranges", "--", "python", "app.py", *args,
                     env=environ, cwd=app)  # fmt: skip


def table(stderr: str) -> dict[tuple[str, str], int]:
    """The viewer's rows, as {(domain, range): count}."""
    heading, header, *rows = stderr.splitlines()
    assert heading.startswith("kname --show-ranges: ") and header.split() == [
        "domain", "range", "count"
    ]  # fmt: skip
    found = {}
    for row in rows:
        domain, rest = row.split("  ", 1)
        name, count = rest.strip().rsplit(None, 1)
        found[domain, name] = int(count)
    return found


def test_it_prints_the_ranges_the_program_emitted(kname_venv, app, inject_lib, tmp_path) -> None:
    result = show(kname_venv, app)
    assert result.returncode == 4  # the program's own exit status
    assert result.stdout == "done\n"
    assert result.stderr.splitlines()[0] == (
        "kname --show-ranges: 4 NVTX ranges in 1 domain, from 1 process"
    )
    assert table(result.stderr) == {("kname", STEP): 3, ("kname", MAIN): 1}
    # The same program under the test suite's own NVTX capture: the same ranges.
    env = {"KNAME": "1", **SIMULATOR, "PYTHONPATH": None}
    _, capture = run_captured([str(kname_venv.python), "app.py"], inject_lib, tmp_path, env=env,
                              cwd=app)  # fmt: skip
    assert Counter(capture.ranges("kname")) == {STEP: 3, MAIN: 1}


def test_it_counts_a_forked_childs_ranges_too(kname_venv: Venv, app: Path) -> None:
    result = show(kname_venv, app, "--fork")
    assert result.returncode == 4, result.stderr
    assert result.stderr.splitlines()[0].endswith("from 2 processes")
    assert table(result.stderr) == {("kname", STEP): 4, ("kname", MAIN): 1}


def test_it_says_which_ranges_were_never_closed(kname_venv: Venv, app: Path) -> None:
    result = show(kname_venv, app, "--leave-open")
    assert result.stderr.splitlines()[-1] == "1 range of domain mine never closed"
    assert table(result.stderr.rsplit("\n", 2)[0] + "\n")[("mine", "left open")] == 1


def test_it_says_when_no_range_was_emitted(kname_venv: Venv, app: Path) -> None:
    result = show(kname_venv, app, env={"KNAME_MODE": "census"})
    assert result.returncode == 4
    assert result.stderr == (
        "kname --show-ranges: NVTX was used in 1 process, but no range was pushed "
        "(KNAME_MODE=census emits none); see kname doctor\n"
    )


def test_it_says_when_nvtx_was_never_called(kname_venv: Venv, app: Path) -> None:
    result = run_kname(kname_venv, "run", "--show-ranges", "--", "sh", "-c", "exit 3",
                       env={"XDG_CACHE_HOME": str(app / "cache")}, cwd=app)  # fmt: skip
    assert result.returncode == 3
    assert result.stderr == (
        "kname --show-ranges: no NVTX call was made (NVTX never loaded the viewer): nothing "
        "was named; see kname doctor\n"
    )


def cached(app: Path) -> Path:
    """The viewer's one build in the app's cache folder."""
    (library,) = (app / "cache" / "kname").glob("*.so")
    return library


def test_the_viewer_is_built_once_and_reused(kname_venv: Venv, app: Path) -> None:
    show(kname_venv, app)
    files = sorted((app / "cache" / "kname").iterdir())
    assert [p.name for p in files] == [cached(app).name, f"{cached(app).name}.sha256"]
    inodes = [p.stat().st_ino for p in files]
    assert table(show(kname_venv, app).stderr) == {("kname", STEP): 3, ("kname", MAIN): 1}
    assert [p.stat().st_ino for p in sorted((app / "cache" / "kname").iterdir())] == inodes


@pytest.mark.parametrize("found", ["an empty file", "other bytes", "another NVTX tool"])
def test_a_cached_viewer_its_checksum_does_not_vouch_for_is_built_again(
    kname_venv: Venv, app: Path, inject_lib: Path, found: str
) -> None:
    show(kname_venv, app)
    library = cached(app)
    planted = {"an empty file": b"", "other bytes": bytes(range(256)) * 64,
               "another NVTX tool": inject_lib.read_bytes()}[found]  # fmt: skip
    library.write_bytes(planted)
    result = show(kname_venv, app)
    assert table(result.stderr) == {("kname", STEP): 3, ("kname", MAIN): 1}
    assert library.read_bytes() not in (planted, b"")  # built again, in its place


def folder_at_the_viewers_path(app: Path, kname_venv: Venv) -> tuple[Path, str]:
    show(kname_venv, app)
    library = cached(app)
    library.unlink()
    library.mkdir()
    (library / "mine").write_text("kept")
    return library / "mine", f"Is a directory: {library})"


def file_at_the_cache_folders_path(app: Path, kname_venv: Venv) -> tuple[Path, str]:
    (app / "cache" / "kname").write_text("kept")
    return app / "cache" / "kname", f"Not a directory: {app / 'cache' / 'kname'})"


@pytest.mark.parametrize("in_the_way", [folder_at_the_viewers_path, file_at_the_cache_folders_path])
def test_a_cache_that_cannot_keep_the_viewer_costs_one_line_and_leaves_nothing_behind(
    kname_venv: Venv, app: Path, tmp_path: Path, in_the_way
) -> None:
    kept, reason = in_the_way(app, kname_venv)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = show(kname_venv, app, env={"TMPDIR": str(scratch)})
    said, rest = result.stderr.split("\n", 1)
    assert said == (
        f"kname run --show-ranges: cannot keep its NVTX viewer in {app / 'cache' / 'kname'} "
        f"({reason}, so it is built at every run: set XDG_CACHE_HOME to a writable folder"
    )
    assert table(rest) == {("kname", STEP): 3, ("kname", MAIN): 1}
    assert result.returncode == 4
    assert kept.read_text() == "kept"  # what was in the way is the user's: left as it was
    assert list(scratch.iterdir()) == []  # the build for this run went with it


def test_concurrent_first_runs_each_get_a_whole_viewer(tmp_path: Path) -> None:
    cache, runs = tmp_path / "cache", 6
    start = threading.Barrier(runs)

    def first_run(_: int) -> bytes:
        start.wait()
        with show_ranges.viewer(cache) as library:
            return library.read_bytes()

    with ThreadPoolExecutor(runs) as pool:
        seen = list(pool.map(first_run, range(runs)))
    (library,) = cache.glob("*.so")
    assert sorted(p.name for p in cache.iterdir()) == [library.name, f"{library.name}.sha256"]
    assert all(b.startswith(b"\x7fELF") and len(b) == library.stat().st_size for b in seen)


def test_the_viewer_is_built_anew_when_the_nvtx_declarations_it_includes_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its cache is keyed by the header too (an upgrade that changes only nvtx_tool.h must not
    reuse a viewer built from the old one)."""
    source = tmp_path / "package" / show_ranges.SOURCE.name
    header = source.with_name("nvtx_tool.h")
    source.parent.mkdir()
    source.write_bytes(show_ranges.SOURCE.read_bytes())
    header.write_bytes(show_ranges.SOURCE.with_name(header.name).read_bytes())
    monkeypatch.setattr(show_ranges, "SOURCE", source)
    with show_ranges.viewer(tmp_path / "cache"):
        pass
    header.write_text(header.read_text() + "/* changed */\n")
    with show_ranges.viewer(tmp_path / "cache"):
        pass
    assert len(list((tmp_path / "cache").glob("*.so"))) == 2


def plant(cache: Path, name: str, planted: bytes) -> None:
    """A library and a checksum that vouches for it, as another user could leave them."""
    (cache / name).write_bytes(planted)
    (cache / f"{name}.sha256").write_text(hashlib.sha256(planted).hexdigest())


def planted_in_a_built_cache(cache: Path, inject_lib: Path) -> tuple[str, bytes]:
    """(the viewer's name, the NVTX tool planted in its place) in `cache`, built first."""
    with show_ranges.viewer(cache):
        (name,) = [library.name for library in cache.glob("*.so")]
    planted = inject_lib.read_bytes()
    plant(cache, name, planted)
    return name, planted


def test_a_viewer_planted_in_a_cache_others_may_write_is_never_loaded(
    kname_venv: Venv, app: Path, inject_lib: Path
) -> None:
    show(kname_venv, app)
    cache, planted = app / "cache" / "kname", inject_lib.read_bytes()
    plant(cache, cached(app).name, planted)
    cache.chmod(0o777)
    result = show(kname_venv, app)
    said, rest = result.stderr.split("\n", 1)
    assert said == (
        f"kname run --show-ranges: its cache {cache} is not used (others may write it: mode "
        "0777), so its NVTX viewer is built at every run: make the folder yours alone (chmod "
        "go-w), or set XDG_CACHE_HOME to one that is"
    )
    assert table(rest) == {("kname", STEP): 3, ("kname", MAIN): 1}  # kname's viewer, not it
    assert cached(app).read_bytes() == planted  # a folder others may write: nothing written


def as_nobody(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    os.chown(path, 65534, 65534)


def cache_others_may_write(cache: Path) -> str:
    cache.chmod(0o770)
    return "others may write it: mode 0770"


def cache_of_another_user(cache: Path) -> str:
    as_nobody(cache)
    return f"it is owned by uid 65534, not by uid {os.geteuid()}"


def cache_through_a_symlink(cache: Path) -> str:
    cache.rename(cache.with_name("elsewhere"))
    cache.symlink_to(cache.with_name("elsewhere"))
    return "it is a symlink"


@pytest.mark.parametrize(
    "not_ours", [cache_others_may_write, cache_of_another_user, cache_through_a_symlink]
)
def test_a_cache_that_is_not_the_users_alone_is_not_used_and_said_so_in_one_line(
    tmp_path: Path, inject_lib: Path, capsys: pytest.CaptureFixture[str], not_ours
) -> None:
    cache = tmp_path / "cache"
    name, planted = planted_in_a_built_cache(cache, inject_lib)
    problem = not_ours(cache)
    capsys.readouterr()
    with show_ranges.viewer(cache) as library:
        assert library.read_bytes().startswith(b"\x7fELF")
        assert library.read_bytes() != planted  # built now, for this run only
        assert stat.S_IMODE(library.parent.stat().st_mode) == 0o700
    assert not library.parent.exists()
    said = capsys.readouterr().err
    assert said == (
        f"kname run --show-ranges: its cache {cache} is not used ({problem}), so its NVTX viewer "
        "is built at every run: make the folder yours alone (chmod go-w), or set XDG_CACHE_HOME "
        "to one that is\n"
    )
    assert (cache / name).read_bytes() == planted  # left as it was


def test_a_viewer_file_of_another_user_in_the_users_cache_is_never_loaded(
    tmp_path: Path, inject_lib: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    name, planted = planted_in_a_built_cache(cache, inject_lib)
    as_nobody(cache / name)
    with show_ranges.viewer(cache) as library:
        loaded = library.read_bytes()
    assert loaded not in (planted, b"")
    assert capsys.readouterr().err == ""
    assert (cache / name).read_bytes() == loaded  # built again, in its place


def test_nvtx_loads_the_cached_file_whose_bytes_were_checked_whatever_becomes_of_its_name(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    with show_ranges.viewer(cache):
        pass  # built and kept
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    with show_ranges.viewer(cache) as library:
        (kept,) = cache.glob("*.so")
        assert library.parent == Path(f"/proc/{os.getpid()}/fd") and library.samefile(kept)
        checked = library.read_bytes()
        kept.unlink()
        kept.write_bytes(b"swapped")  # a name swapped between the check and the load
        assert library.read_bytes() == checked
    assert not library.exists()  # open while the program runs only


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CC": "/no/such/cc"}, "kname run --show-ranges: cannot run the C compiler '/no/such/cc'"),
        ({"CC": 'gcc "-DX'}, "kname run --show-ranges: CC='gcc \"-DX' is not a command line "
         "(No closing quotation): set CC to a C compiler"),
        ({"NVTX_INJECTION64_PATH": "/opt/nsight/libToolsInjection64.so"},
         "kname run --show-ranges: NVTX_INJECTION64_PATH is already set"),
    ],
)  # fmt: skip
def test_it_cannot_run_in_one_line_and_exit_2(kname_venv: Venv, app: Path, env, message) -> None:
    result = show(kname_venv, app, env=env)
    assert (result.returncode, result.stdout) == (2, "")  # the program did not run
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(message), result.stderr


def test_read_log_and_render_escape_what_the_program_named(tmp_path: Path) -> None:
    log = tmp_path / "ranges.log"
    log.write_text(
        "init\t7\npush\t7\t7\tkname\ta\\tb \\x1b[2J\npop\t7\t7\tkname\n"
        "start\t7\t8\t<global>\tphase\t1\nend\t7\t8\t<global>\t1\npop\t7\t9\tkname\n"
    )
    ranges = show_ranges.read_log(str(log))
    assert ranges.counts == {("kname", "a\tb \\x1b[2J"): 1, ("<global>", "phase"): 1}
    assert ranges.processes == {7} and not ranges.open_ranges
    text = show_ranges.render(ranges, {})
    assert all(line.isprintable() for line in text.splitlines())
    assert "a\\tb" in text and json.dumps(text)
