"""The live launch census of this process: launches per call site, and its report at exit.

The document's layout (schema 1), its table and diff, and saved files are kname.documents.
A process started beneath the one that owns KNAME_REPORT (a subprocess, a multiprocessing
worker) reports only if it launched anything, and to a file of its own beside the owner's
(`census.pid4242.json`, documents/owner.py), so it cannot overwrite it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from kname import counters, naming
from kname._locks import reset_in_child
from kname._sigterm import at_exit
from kname._warnings import warn_once
from kname.config import KNAME_REPORT

if TYPE_CHECKING:
    from kname.documents.owner import Output

# kname.documents (and the json it imports, about 2 ms) is imported where a census is asked for
# or a report set up, never by a start-up that writes none; write_at_exit() imports what the exit
# write needs, so that no import runs at exit (maybe in a signal handler, inside another import).

FORMATS = ("table", "json")


def names() -> dict[str, int]:
    """{call-site name: launches} for every site that launched, in first-seen order."""
    counts: dict[str, int] = {}
    for (name, _kernel, _lib), launches in _rows().items():
        counts[name] = counts.get(name, 0) + launches
    return counts


def census() -> dict[str, Any]:
    """The census so far, as the JSON document of schema 1 (see kname.documents.schema), with
    who made it: this process's rank, host and device (kname.ranks.meta), its program and the
    time (documents/run_facts.py)."""
    from kname.documents.build import census_document
    from kname.documents.run_facts import run_facts
    from kname.ranks import find_rank, meta, visible_device

    record = meta(find_rank(), device=visible_device()) | run_facts()
    return census_document(_rows(), ranks=record)


def _rows() -> dict[tuple[str, str, str], int]:
    """Launches per (name, kernel, library), in first-seen order."""
    return counters.counts()


def report(file: IO[str] | str | os.PathLike | None = None, format: str = "table") -> None:
    """Print the census to `file` (default: stdout) as a table or as JSON.

    `file` may be an open text stream or a path; a path is written atomically.
    """
    if format not in FORMATS:
        raise ValueError(f"report(format={format!r}): accepted formats are 'table' and 'json'")
    from kname.documents.files import write_atomically
    from kname.documents.schema import render_json
    from kname.documents.sources import with_sources
    from kname.documents.tables import render_census_table

    document = census()
    if format == "json":  # a saved census keeps the source of its lines, for its page
        text = render_json(with_sources(document, naming.shown_files()))
    else:
        text = render_census_table(document)
    if file is None or hasattr(file, "write"):
        stream = sys.stdout if file is None else file
        stream.write(text)
        stream.flush()
    else:
        write_atomically(os.fspath(file), text)


class _ExitPlan(NamedTuple):
    """What the census does as the process ends (write_at_exit()), replaced whole."""

    destination: str  # "-" (the table on stderr) or the path asked for
    output: Output | None  # the file claimed for a path (documents/owner.py)
    owner: int  # the pid of the process that owns the census (its table stays on stderr)
    strict: bool  # KNAME_STRICT: a census that cannot be written makes the exit status 2


_exit_plan: _ExitPlan | None = None  # None: nothing at exit
_exit_writer: Callable[[], None] | None = None  # _write_now, registered once, run once


def write_at_exit(destination: str, strict: bool = False) -> None:
    """At exit, print the census table on stderr (`-`) or write it as JSON to `destination`.

    With `strict` (KNAME_STRICT=1), a census that cannot be written makes the exit status 2.
    """
    global _exit_plan, _exit_writer
    import socket  # noqa: F401  (ranks.meta's host name: no import at exit)

    from kname import ranks  # noqa: F401  (for census(): who wrote it)
    from kname.documents import build, schema, sources, tables  # noqa: F401  (for _write_now)
    from kname.documents.owner import claim, owner_pid

    # Claimed now: a relative path means where the program started, even if it changes
    # directory; a file another process writes while this one runs is not replaced.
    output = None if destination == "-" else claim(destination, KNAME_REPORT)
    _exit_plan = _ExitPlan(destination, output, owner_pid(), strict)
    if _exit_writer is None:
        # Registered once, however often install() runs; the latest destination wins. Also
        # when SIGTERM ends the process (a Pool's terminate(), a job's time limit).
        _exit_writer = at_exit(_write_now)
        reset_in_child(_write_at_multiprocessing_exit)


def cancel_at_exit() -> None:
    """Write no census at exit (the `kname` command itself must not overwrite the user's)."""
    global _exit_plan
    _exit_plan = None


def _write_now() -> None:
    plan = _exit_plan
    if plan is None:
        return
    from kname.documents.owner import write_output  # imported by write_at_exit()
    from kname.documents.schema import render_json
    from kname.documents.sources import with_sources
    from kname.documents.tables import render_census_table

    try:
        document = census()
        launched = bool(document["total_launches"])
        if plan.output is not None:  # in a child, its own file beside the owner's
            what = "launch census (KNAME_REPORT)"
            text = render_json(with_sources(document, naming.shown_files()))
            write_output(plan.output, text, what, launched=launched)
        elif launched or os.getpid() == plan.owner:  # a table on stderr stays there, in a child too
            # The tables of a program and its children share stderr: each says whose it is
            # (and its rank, in a job: tables.heading adds it).
            title = f"kname census of process {os.getpid()}"
            sys.stderr.write(render_census_table(document, title=title))
            sys.stderr.flush()
    except Exception as exc:  # never a traceback at exit
        reason = f"{type(exc).__name__}: {exc.strerror if isinstance(exc, OSError) else exc}"
        shown = plan.destination if plan.output is None else plan.output.path
        warn_once(
            "report",
            f"KNAME_REPORT={shown!r} could not be written ({reason}); "
            "the launch census was not saved"
            + (" (KNAME_STRICT is on: exit status 2)" if plan.strict else ""),
        )
        if plan.strict:
            # Past atexit nothing else can set the status; flush what os._exit would drop.
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(2)


_multiprocessing_armed = False


def _write_at_multiprocessing_exit() -> None:
    """In a forked child: write the census when multiprocessing ends it.

    multiprocessing ends the processes it forks with os._exit, past atexit, after running its own
    Finalize callbacks. It clears those in the child after this fork hook has run, then runs its
    after-fork callbacks: so the Finalize is registered from one of those.
    """
    global _multiprocessing_armed
    util = sys.modules.get("multiprocessing.util")
    # Armed once: grandchildren inherit the after-fork callback along with the flag.
    if util is not None and not _multiprocessing_armed and _exit_writer is not None:
        util.register_after_fork(_exit_writer, _finalize_with)
        _multiprocessing_armed = True


def _finalize_with(write: Callable[[], None]) -> None:
    from multiprocessing import util

    # The lowest priority: after multiprocessing's own, and after the child's children are joined.
    util.Finalize(None, write, exitpriority=-(2**31))
