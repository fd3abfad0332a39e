"""KNAME_MODE=profile: the session install() starts for the whole process, and its outputs.

At exit the table (KNAME_PROFILE_TOP call sites) goes to stderr, the document to KNAME_REPORT
(unless it is `-`), the trace to KNAME_PROFILE_TRACE and the page to KNAME_PROFILE_HTML. A
process started beneath the one that owns them (a subprocess, a spawned worker) writes files of
its own beside them (`profile.pid4242.json`, documents/owner.py), as the launch census does, so
that `kname report` can merge them; it prints its table only when there is no file to write, and
nothing at all when it launched nothing (a compile worker, a DataLoader worker).
"""

from __future__ import annotations

import os

from kname.config import Config
from kname.documents.owner import owner_pid
from kname.profiling.session import ProfileSession

_session: ProfileSession | None = None


def start(config: Config) -> ProfileSession | None:
    """Collect GPU times until exit, outputs then; None (said in one line) if CUPTI cannot be
    used, and launches are still named."""
    global _session
    if _session is not None and _session.collecting:
        return _session  # install() again after uninstall(): the same session goes on
    session = ProfileSession(keep_streams=config.trace is not None, max_records=config.trace_max)
    if not session.start():
        return None
    files = {"json": None if config.report in (None, "-") else config.report}
    files.update(trace=config.trace, html=config.html)
    # Beneath the owner, the files are its own beside the owner's (the session claims them),
    # and none at all when it launched nothing.
    owns = owner_pid() == os.getpid()
    quiet = not owns and any(files.values())
    session.write_at_exit(**files, top=config.top, print_table=not quiet, only_if_launched=not owns)
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
