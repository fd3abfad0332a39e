"""A page's title, in its tab and at its top: what it shows, and of which run.

`kname profile: train.py, 4 ranks on node1, 2026-12-06 08:30 UTC`: the program, the ranks, the
host and the time of writing, from the rank records (schema.py `ranks`, documents/run_facts.py);
what a document does not say (a file written before they were kept) is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kname.documents.run_facts import PROGRAM, WRITTEN
from kname.documents.schema import RANKS
from kname.documents.text import count_of


def page_title(document: Mapping[str, Any], what: str) -> str:
    """`what` (`kname profile`), then the run the document is of, as far as it says."""
    records = document.get(RANKS, ())
    programs = sorted({r[PROGRAM] for r in records if r.get(PROGRAM)})
    hosts = sorted({r["host"] for r in records if r.get("host")})
    times = sorted(r[WRITTEN] for r in records if r.get(WRITTEN))
    program = programs[0] if len(programs) == 1 else _several(programs, "program")
    ranks = count_of(len(records), "rank") if len(records) > 1 else ""
    where = f"on {hosts[0] if len(hosts) == 1 else _several(hosts, 'host')}" if hosts else ""
    when = times[-1].replace("T", " ")[:16] + " UTC" if times else ""
    said = _then(_then(_then(program, ", ", ranks), " ", where), ", ", when)
    return f"{what}: {said}" if said else what


def _then(said: str, separator: str, more: str) -> str:
    return separator.join(filter(None, (said, more)))


def _several(values: list[str], kind: str) -> str:
    return count_of(len(values), kind) if values else ""
