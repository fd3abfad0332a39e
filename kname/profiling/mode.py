"""KNAME_MODE=profile: the session install() starts for the whole process, and its outputs.

At exit the table (KNAME_PROFILE_TOP call sites) goes to stderr, the document to KNAME_REPORT
(unless it is `-`), the trace to KNAME_PROFILE_TRACE and the page to KNAME_PROFILE_HTML. A
process started beneath the one that owns them (a subprocess, a spawned worker) writes files of
its own beside them (`profile.pid4242.json`), as the launch census does, so that `kname report`
can merge them; it prints its table only when there is no file to write.
"""

from __future__ import annotations

import os

from kname.census_file import OWNER_VARIABLE
from kname.config import Config
from kname.profiling.session import ProfileSession

_session: ProfileSession | None = None


def start(config: Config) -> ProfileSession | None:
    """Collect GPU times until exit, outputs then; None (said in one line) if CUPTI cannot be
    used, and launches are still named."""
    global _session
    if _session is not None and _session.collecting:
        return _session  # install() again after uninstall(): the same session goes on
    session = ProfileSession(keep_streams=config.trace is not None)
    if not session.start():
        return None
    files = {"json": None if config.report in (None, "-") else config.report}
    files.update(trace=config.trace, html=config.html)
    if not _owns_outputs():
        files = {kind: path and beside(path) for kind, path in files.items()}
    quiet = not _owns_outputs() and any(files.values())
    session.write_at_exit(**files, top=config.top, print_table=not quiet)
    _session = session
    return session


def cancel() -> None:
    """Stop this process's session, with no table and no file at exit: the `kname` command
    itself (started with KNAME_MODE=profile in the shell) must not overwrite the user's profile
    with its own empty one."""
    global _session
    session, _session = _session, None
    if session is not None:
        session.cancel_exit_outputs()
        session.stop()


def beside(path: str) -> str:
    """Where a process beneath the owner writes `path`: `profile.json` -> `profile.pid42.json`."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}.pid{os.getpid()}{suffix or '.json'}"


def _owns_outputs() -> bool:
    """Whether this process owns the outputs; the first to ask marks itself for its children."""
    inherited = os.environ.get(OWNER_VARIABLE, "")
    if inherited.isdigit():
        return int(inherited) == os.getpid()
    os.environ[OWNER_VARIABLE] = str(os.getpid())
    return True
