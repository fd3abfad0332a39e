"""What run a saved document is of, beside who wrote it: the program and when it was written.

Two optional fields of a rank record (schema.py, `ranks`; absent in files written before):
`program`, the program's file name (`train.py`; never its arguments, which may hold secrets) and
`written`, the time the document was made, UTC, to the second (`2026-12-06T08:30:12Z`). A merge
keeps every rank's record, so both are carried with the ranks; the pages' titles say them.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

PROGRAM = "program"
WRITTEN = "written"
MAX_PROGRAM = 255  # a file name
_WRITTEN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def run_facts() -> dict[str, str]:
    """This process's program and the time now, for its rank record."""
    return {PROGRAM: program_name(), WRITTEN: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def program_name(argv: list[str] | None = None) -> str:
    """The file name of the program this process runs (`app.py`); `-c` for a command, `python`
    for an interactive session."""
    args = sys.argv if argv is None else argv
    first = args[0] if args else ""
    if first in ("", "-"):
        return "python"
    return os.path.basename(first)[:MAX_PROGRAM] or "python"


def run_facts_problem(record: Mapping[str, Any]) -> str | None:
    """Which of a rank record's run facts is malformed (its field name), or None."""
    program = record.get(PROGRAM)
    if program is not None and not (isinstance(program, str) and len(program) <= MAX_PROGRAM):
        return PROGRAM
    written = record.get(WRITTEN)
    if written is not None and not (isinstance(written, str) and _WRITTEN.fullmatch(written)):
        return WRITTEN
    return None
