"""Which process writes the saved files, and where the others write theirs.

Each rank of a job writes its own path (kname.rank_paths: `{rank}`, `{host}` and `{pid}` in it,
and `.rank3` before its suffix in a job of more than one rank), so that no rank overwrites
another. The first process of a rank to ask owns that rank's outputs (KNAME_REPORT, a
profile's files) and marks itself in the environment, with its rank and the paths it claimed;
processes started beneath it (a subprocess, a DataLoader worker) inherit the mark and, for those
paths only, write files of their own beside the owner's (`census.rank3.pid4242.json`), so that
none overwrites another and `kname report` can merge them. A process of another rank (a worker
its launcher started), or one given a path of its own, owns its own.

Processes started apart (not beneath one another) that name one path each own it: the first
to finish writes it, and each later one finds that the file changed while it ran and writes its
own beside it, in one line. A process's files (a profile, its trace, its page) are decided
together: all in place or all beside. A file left by an earlier run is replaced: it did not
change.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kname._warnings import warn_once
from kname.documents.files import Identity, identity, write_atomically, written_here
from kname.rank_paths import expand, implied_folder, tagged
from kname.ranks import Rank, find_rank

# Mark the process that owns the outputs, and its rank; processes started beneath it inherit
# them. A process whose rank is not the mark's (a worker torchrun started) owns its own.
OWNER_VARIABLE = "_KNAME_REPORT_PID"
OWNER_RANK_VARIABLE = "_KNAME_REPORT_RANK"
# The paths the mark is for (absolute, as a JSON list): a child given another path owns it.
OWNER_PATHS_VARIABLE = "_KNAME_REPORT_PATHS"
# How long a process waits, in all, for another that is deciding and writing in the same
# directory: kname holds it only to write texts already made. Past it, the check alone decides.
LOCK_WAIT_SECONDS = 1.0


@dataclass(frozen=True)
class Output:
    """A file this process writes as it ends, claimed when the process started."""

    path: str  # absolute: where the owner writes it
    owner: int  # the pid of the process that owns the outputs
    found: Identity | None  # the file at `path` when it was claimed (None: none)
    # The first folder a placeholder names (`prof/{host}/`), absolute: made with those beneath
    # it, where missing, as the file is written (None: none, every folder must exist).
    folders: str | None = None


Write = tuple[Output, Callable[[], str], str]  # an output, its text (made when written), its name


class OutputName(NamedTuple):
    """How messages name one of a writer's outputs."""

    variable: str  # KNAME_PROFILE_HTML
    option: str  # --html (kname profile's)
    what: str  # page

    @property
    def said(self) -> str:
        return f"{self.what} ({self.variable})"  # page (KNAME_PROFILE_HTML)


def owner_pid(rank: Rank | None = None, path: str | None = None) -> int:
    """The pid of the process that owns the output at absolute `path` (None: any, as for the
    census table on stderr) for `rank` (default: this process's): the inherited mark's where it
    is of that rank and for that path, else this process's, which marks itself for its children."""
    rank = find_rank() if rank is None else rank
    inherited = os.environ.get(OWNER_VARIABLE, "")
    same_rank = os.environ.get(OWNER_RANK_VARIABLE, "") == _rank_mark(rank)
    marked = inherited.isascii() and inherited.isdigit()
    paths = _marked_paths() if marked and same_rank else []
    if marked and same_rank and (path is None or path in paths):
        return int(inherited)
    if not (marked and same_rank and int(inherited) == os.getpid()):
        paths = []  # another process's mark, or none: this one's own, for its own paths
    os.environ[OWNER_VARIABLE] = str(os.getpid())
    os.environ[OWNER_RANK_VARIABLE] = _rank_mark(rank)
    os.environ[OWNER_PATHS_VARIABLE] = json.dumps(paths + ([] if path is None else [path]))
    return os.getpid()


def owns(requested: Iterable[str]) -> bool:
    """Whether this process owns every output the paths `requested` name (claim()); with none,
    whether it owns its rank's (the census table on stderr)."""
    claimed = [claim(path) for path in requested]
    if not claimed:
        return owner_pid() == os.getpid()
    return all(output.owner == os.getpid() for output in claimed)


def _marked_paths() -> list[str]:
    """The paths the inherited mark is for; none where the variable is not a list of them."""
    try:
        paths = json.loads(os.environ.get(OWNER_PATHS_VARIABLE, "[]"))
    except ValueError:
        return []
    return [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []


def claim(requested: str, variable: str = "the output path", rank: Rank | None = None) -> Output:
    """The output that `requested` (the value of `variable`) names for this process: the one
    place that decides the path. This rank's own (rank_paths.expand, which raises a
    PathTemplateError for a bad placeholder), made absolute now (the program may change
    directory before it ends), with what is there now and the folders its placeholders name."""
    rank = find_rank() if rank is None else rank
    expanded = expand(requested, rank, variable=variable)
    path, folders = os.path.abspath(expanded), implied_folder(requested, expanded)
    folders = None if folders is None else os.path.abspath(folders)
    return Output(path, owner_pid(rank, path), identity(path), folders)


def claim_each(
    requested: Mapping[str, str | None], names: Mapping[str, OutputName]
) -> dict[str, Output]:
    """claim() each output `requested` names, by kind (None: none), one file per output: one
    naming the file of one before it is left out, in one line (written both, the file would
    hold only the last)."""
    kept: dict[str, Output] = {}
    for kind, path in requested.items():
        if not path:
            continue
        output = claim(path, names[kind].variable)
        first = next((other for other in kept if kept[other].path == output.path), None)
        if first is None:
            kept[kind] = output
            continue
        name, before = names[kind], names[first]
        warn_once(
            f"same-file:{name.variable}",
            f"{name.variable} ({name.option}) names the file {before.variable} ({before.option}) "
            f"names, {output.path}; one file holds one output: the {name.what} is not written",
        )
    return kept


def _rank_mark(rank: Rank) -> str:
    """The rank in the owner's mark: '' for a lone process, else `launcher rank/world size`."""
    return "" if rank.launcher is None else f"{rank.launcher} {rank.rank}/{rank.world_size}"


def write_output(output: Output, text: str, what: str, launched: bool = True) -> str | None:
    """Write `text` as `output` and return the path written; `what` names it in a message
    ("launch census (KNAME_REPORT)"). write_outputs() for one output; its errors are raised."""
    (written,) = write_outputs([(output, lambda: text, what)], launched)
    return written


def write_outputs(
    writes: Sequence[Write],
    launched: bool = True,
    failed: Callable[[Output, Exception], None] | None = None,
) -> list[str | None]:
    """Write this process's outputs together and return the path each went to (None: not
    written). `failed(output, error)` is told of an output that could not be written (an
    OSError, or what making its text raised); the others are written still.

    A process beneath the owner (a forked child too) writes its own files beside the owner's.
    The owner replaces the files at its paths if each is still what it found, or what it wrote
    itself; if another process wrote any of them meanwhile, all go beside (a profile and its
    page stay together), with one line each. A process that `launched` nothing writes nothing
    beside another's file: it has nothing to add (multiprocessing's resource tracker, started
    with a rank's variables, is no rank).
    """
    written: list[str | None] = [None] * len(writes)
    # The texts are made first: the directories stay locked only while deciding and writing.
    texts = [_text(output, text, failed) for output, text, _ in writes]
    outputs = [output for output, _, _ in writes]
    taken: list[Output] = []
    for output in outputs:  # before the lock, which is on the folder; _write says what failed
        with contextlib.suppress(OSError):
            _make_folders(output)
    if outputs and os.getpid() == outputs[0].owner:
        with _directories_locked([output.path for output in outputs]):
            taken = [output for output in outputs if _changed(output)]
            if not taken:
                for at, output in enumerate(outputs):
                    written[at] = _write(output.path, texts[at], failed, output)
                return written
    if not launched:
        return written
    for at, (output, _, what) in enumerate(writes):
        written[at] = path = _write(beside(output.path), texts[at], failed, output)
        if path is not None and taken:
            _say_moved(output, path, what, output in taken)
    return written


def _text(
    output: Output, text: Callable[[], str], failed: Callable[[Output, Exception], None] | None
) -> str | None:
    try:
        return text()
    except Exception as error:
        if failed is None:
            raise
        failed(output, error)
        return None


def _changed(output: Output) -> bool:
    """Whether another process wrote `output`'s path since this one claimed it."""
    current = identity(output.path)
    return current is not None and current not in (output.found, written_here(output.path))


def _say_moved(output: Output, path: str, what: str, taken: bool) -> None:
    if taken:
        message = (
            f"another process wrote {output.path} while this one ran; this process's {what} is "
            f"in {path} instead"
        )
    else:
        message = f"this process's {what} is in {path}, beside its other files, not {output.path}"
    warn_once(f"moved:{output.path}", message)


def beside(path: str) -> str:
    """Where a process beneath the owner writes `path`: `census.json` -> `census.pid42.json`,
    by the rule of a rank's path (rank_paths.tagged): `p.rank3.tar.gz` -> `p.rank3.pid42.tar.gz`."""
    return tagged(path, f"pid{os.getpid()}")


def _write(
    path: str,
    text: str | None,
    failed: Callable[[Output, Exception], None] | None,
    output: Output,
) -> str | None:
    """Write `text` at `path` (None: its text could not be made, nothing to write)."""
    if text is None:
        return None
    try:
        _make_folders(output)
        write_atomically(path, text)
    except Exception as error:
        if failed is None:
            raise
        failed(output, error)
        return None
    return path


def _make_folders(output: Output) -> None:
    """Make the folders `output`'s placeholders name (`prof/{host}/`) and those beneath them,
    where missing: private (0700), as they hold this user's files."""
    if output.folders is None:
        return
    top = os.path.dirname(output.folders)
    beneath = os.path.relpath(os.path.dirname(output.path), top)
    if beneath == os.curdir or beneath.split(os.sep)[0] == os.pardir:  # `{host}/..`: none
        return
    for part in beneath.split(os.sep):
        top = os.path.join(top, part)
        with contextlib.suppress(FileExistsError):
            os.mkdir(top, 0o700)


@contextlib.contextmanager
def _directories_locked(paths: Sequence[str]) -> Iterator[None]:
    """Hold an exclusive lock on the directories of `paths` (symlinks followed) while this
    process decides whether the files are its own and writes them, so that two processes ending
    together cannot both take one, nor each take some. Where one cannot be had within
    LOCK_WAIT_SECONDS (another program holds it, or locking is not possible here), the check
    alone decides: a lock held by what is not kname must not hold up every exit.
    """
    # Always in the same order: two processes never wait on each other's directory.
    directories = sorted({os.path.dirname(os.path.realpath(path)) for path in paths})
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    with contextlib.ExitStack() as held:
        for directory in directories:
            try:
                # Never a FIFO or a device (a typo, a link into one): opening one could wait.
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK
                descriptor = os.open(directory, flags)
            except OSError:  # no such directory, or not one: the write says what is wrong
                continue
            held.callback(os.close, descriptor)  # which releases the lock
            if not _lock(descriptor, deadline):
                break
        yield


def _lock(descriptor: int, deadline: float) -> bool:
    """Lock `descriptor` by `deadline`; False if it could not be (held by another process)."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return False
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                return False  # a file system without flock (some network ones)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
