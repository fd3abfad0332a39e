"""KNAME_MODE=profile: the session install() starts for the whole process, and its outputs.

At exit the table (KNAME_PROFILE_TOP call sites) goes to stderr, under a heading that names
the process (`kname profile of process 4242: ...`: a program and its children share stderr),
the document to KNAME_REPORT (unless it is `-`), the trace to KNAME_PROFILE_TRACE and the page
to KNAME_PROFILE_HTML. Each rank of a job writes its own files (`profile.rank3.json`,
documents/owner.py); only rank 0 prints its table when there are files to merge. A process
started beneath the one that owns them (a subprocess, a spawned worker) writes files of its own
beside them (`profile.pid4242.json`), as the launch census does, so that `kname report` can
merge them; it prints its table only when there is no file to write, and nothing at all when it
launched nothing (a compile worker, a DataLoader worker).

KNAME_PROFILE_FLUSH rewrites the JSON and the page every so many seconds while the program
runs; KNAME_PROFILE_DELAY and KNAME_PROFILE_DURATION profile a window of a long run: collecting
starts that many seconds after start-up, and stops that many seconds later.
"""

from __future__ import annotations

import threading

from kname.config import Config
from kname.documents.owner import owns as owns_outputs
from kname.profiling.session import ProfileSession
from kname.ranks import find_rank

_session: ProfileSession | None = None


def start(config: Config) -> ProfileSession | None:
    """Collect GPU times until exit (or in the window the configuration gives), outputs then;
    None (said in one line) if CUPTI cannot be used, and launches are still named; the exit
    then says, in one line, that no GPU time was collected and which files were not written."""
    global _session
    if _session is not None and _session.collecting:
        return _session  # install() again after uninstall(): the same session goes on
    session = ProfileSession(
        keep_streams=config.trace is not None,
        max_records=config.trace_max,
        memory=config.memory,
        verdict=config.verdict,
    )
    started = config.delay is not None or _start_window(session, config)
    files = {"json": None if config.report in (None, "-") else config.report}
    files.update(trace=config.trace, html=config.html)
    # Beneath the owner, the files are its own beside the owner's (the session claims them),
    # and none at all when it launched nothing; a path of its own is its own.
    owns = owns_outputs(path for path in files.values() if path)
    session.write_at_exit(
        **files,
        top=config.top,
        print_table=_prints_table(owns, any(files.values())),
        only_if_launched=not owns,
    )
    _session = session  # also where CUPTI did not start: the exit says what was not written
    if not started:
        return None
    if config.flush is not None and any(files.values()):
        session.flush_every(config.flush)
    if config.delay is not None:
        _later(config.delay, _start_window, session, config)
    return session


def _start_window(session: ProfileSession, config: Config) -> bool:
    """Start collecting, to stop after KNAME_PROFILE_DURATION if it is set; False if CUPTI
    cannot be used."""
    if not session.start():
        return False
    if config.duration is not None:
        _later(config.duration, session.stop)
    return True


def _later(seconds: float, call: object, *args: object) -> None:
    # A daemon timer: a program that ends before it fires is not kept waiting for it.
    timer = threading.Timer(seconds, call, args)  # type: ignore[arg-type]
    timer.daemon = True
    timer.name = "kname-profile-window"
    timer.start()


def _prints_table(owns: bool, has_files: bool) -> bool:
    """Whether this process prints its table at exit: always without files; with them, not a
    process beneath their owner, and in a job of several ranks, rank 0 alone."""
    return not has_files or (owns and find_rank().rank == 0)


def cancel() -> None:
    """Stop this process's session, with no table and no file at exit: the `kname` command
    itself (started with KNAME_MODE=profile in the shell) must not overwrite the user's profile
    with its own empty one."""
    global _session
    session, _session = _session, None
    if session is not None:
        session.cancel_exit_outputs()
        session.stop()
