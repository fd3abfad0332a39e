"""Which process writes the saved files, and where the others write theirs.

The first process to ask owns the outputs (KNAME_REPORT, a profile's files) and marks itself in
the environment; processes started beneath it (a subprocess, a multiprocessing worker) inherit
the mark and write files of their own beside the owner's (`census.pid4242.json`), so that none
overwrites another and `kname report` can merge them.
"""

from __future__ import annotations

import os

# Marks the process that owns the outputs; processes started beneath it inherit it.
OWNER_VARIABLE = "_KNAME_REPORT_PID"


def owner_pid() -> int:
    """The pid of the process that owns the outputs: the inherited mark, else this process,
    which marks itself for its children."""
    inherited = os.environ.get(OWNER_VARIABLE, "")
    owner = int(inherited) if inherited.isascii() and inherited.isdigit() else os.getpid()
    os.environ[OWNER_VARIABLE] = str(owner)
    return owner


def beside(path: str) -> str:
    """Where a process beneath the owner writes `path`: `census.json` -> `census.pid42.json`."""
    stem, suffix = os.path.splitext(path)
    return f"{stem}.pid{os.getpid()}{suffix or '.json'}"
