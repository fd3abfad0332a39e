"""The launch census: how many launches each call site made, as a table or as JSON.

JSON schema 1 (`kname.report(format="json")`, `KNAME_REPORT=census.json`, read by
`kname report`):

    {
      "kname": "0.1.0",              the kname version that wrote it
      "schema": 1,                   changes only when the layout does
      "sites": [                     in first-seen order
        {"name": "step app.py:12",   the call-site name, as the profiler shows it
         "kernel": "axpy",           the kernel ("" when kname no longer knows it)
         "lib": "numba",             the library that launched it
         "launches": 20,
         "share": 0.666667,          launches / total_launches, from 0 to 1, 6 decimals
         "order": 1}                 first-seen rank, from 1
      ],
      "total_launches": 30
    }

A site that launched nothing is left out. A process started beneath the one that owns
KNAME_REPORT (a subprocess, a multiprocessing worker) reports only if it launched anything, and
to a file of its own beside the owner's (`census.pid4242.json`), so it cannot overwrite it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from typing import IO, Any, NamedTuple

from kname import callsite
from kname._version import __version__

SCHEMA = 1
FORMATS = ("table", "json")
SITE_FIELDS = ("name", "kernel", "lib", "launches", "share", "order")

# Marks the process that owns KNAME_REPORT; processes started beneath it inherit it.
OWNER_VARIABLE = "_KNAME_REPORT_PID"


class CensusError(ValueError):
    """A saved census cannot be read: the message is one line, naming the file."""


class Change(NamedTuple):
    """How one call site's launch count differs between two censuses."""

    kind: str  # "added", "removed" or "changed"
    name: str
    kernel: str
    before: int
    after: int


def names() -> dict[str, int]:
    """{call-site name: launches} for every site that launched, in first-seen order."""
    counts: dict[str, int] = dict(callsite.retired_launches)
    for site in sorted(list(callsite.sites.values()), key=lambda s: s.order):
        launches = site.launches()
        if launches:
            counts[site.name] = counts.get(site.name, 0) + launches
    return counts


def census() -> dict[str, Any]:
    """The census so far, as the JSON document of schema 1 (see the module docstring)."""
    # Sites evicted from the bounded cache were the oldest, so they come first; only their
    # names and counts were kept.
    rows: dict[tuple[str, str, str], int] = {
        (name, "", ""): count for name, count in dict(callsite.retired_launches).items()
    }
    # list() copies the values in one step under the GIL while other threads may add sites.
    for site in sorted(list(callsite.sites.values()), key=lambda s: s.order):
        launches = site.launches()
        if launches:
            key = (site.name, site.kernel, site.lib)
            rows[key] = rows.get(key, 0) + launches
    total = sum(rows.values())
    sites = [
        {
            "name": name,
            "kernel": kernel,
            "lib": lib,
            "launches": launches,
            "share": round(launches / total, 6),
            "order": order,
        }
        for order, ((name, kernel, lib), launches) in enumerate(rows.items(), 1)
    ]
    return {"kname": __version__, "schema": SCHEMA, "sites": sites, "total_launches": total}


def report(file: IO[str] | str | os.PathLike | None = None, format: str = "table") -> None:
    """Print the census to `file` (default: stdout) as a table or as JSON.

    `file` may be an open text stream or a path; a path is written atomically.
    """
    if format not in FORMATS:
        raise ValueError(f"report(format={format!r}): accepted formats are 'table' and 'json'")
    document = census()
    text = render_json(document) if format == "json" else render_table(document)
    if file is None or hasattr(file, "write"):
        stream = sys.stdout if file is None else file
        stream.write(text)
        stream.flush()
    else:
        write_atomically(os.fspath(file), text)


def render_json(document: Mapping[str, Any]) -> str:
    """The census as JSON text with one site per line (diff-friendly), ending in a newline."""
    sites = ",\n".join(f"    {json.dumps(site, ensure_ascii=False)}" for site in document["sites"])
    return (
        "{\n"
        f'  "kname": {json.dumps(document["kname"])},\n'
        f'  "schema": {json.dumps(document["schema"])},\n'
        + (f'  "sites": [\n{sites}\n  ],\n' if sites else '  "sites": [],\n')
        + f'  "total_launches": {json.dumps(document["total_launches"])}\n'
        "}\n"
    )


def render_table(document: Mapping[str, Any], source: str = "") -> str:
    """The census as an aligned table, most launches first, with a one-line heading."""
    sites = sorted(document["sites"], key=lambda s: (-s["launches"], s["order"]))
    total = document["total_launches"]
    origin = f" ({source}, written by kname {document.get('kname', '?')})" if source else ""
    heading = (
        f"kname census{origin}: {_count(total, 'launch')} from {_count(len(sites), 'call site')}"
    )
    if not sites:
        return heading + "\n"
    header = ("call site", "kernel", "library", "launches", "share", "first seen")
    rows = [
        (s["name"], s["kernel"] or "?", s["lib"] or "?", str(s["launches"]),
         f"{100 * s['share']:.1f}%", str(s["order"]))
        for s in sites
    ]  # fmt: skip
    return heading + "\n" + _columns([header, *rows], right_aligned=(3, 4, 5))


def validate(document: Any, source: str) -> dict[str, Any]:
    """`document` if it is a census of schema 1, else CensusError naming `source` and the fault."""
    if not isinstance(document, dict) or "sites" not in document or "schema" not in document:
        raise CensusError(f"{source}: not a kname census (an object with 'schema' and 'sites')")
    if document["schema"] != SCHEMA:
        raise CensusError(
            f"{source}: census schema {document['schema']!r} is not supported "
            f"(kname {__version__} reads schema {SCHEMA})"
        )
    if not isinstance(document["sites"], list):
        raise CensusError(f"{source}: 'sites' must be a list")
    for index, site in enumerate(document["sites"]):
        _validate_site(site, f"{source}: sites[{index}]")
    total = document.get("total_launches")
    if not _is_count(total):
        raise CensusError(f"{source}: 'total_launches' must be a whole number >= 0, not {total!r}")
    return document


def load(path: str) -> dict[str, Any]:
    """Read and validate a saved census; every failure is a one-line CensusError."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        raise CensusError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CensusError(f"{path}: cannot be read ({reason})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CensusError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    return validate(document, path)


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Launch counts per call site (name and kernel) that differ: added, removed, changed."""
    old, new = _counts(before), _counts(after)
    changes = [Change("added", *key, 0, new[key]) for key in new if key not in old]
    changes += [Change("removed", *key, old[key], 0) for key in old if key not in new]
    changes += [
        Change("changed", *key, old[key], new[key])
        for key in new
        if key in old and old[key] != new[key]
    ]
    return changes


def render_diff(
    before: Mapping[str, Any], after: Mapping[str, Any], labels: tuple[str, str]
) -> str:
    """`compare` as text: a summary line, then one aligned line per changed call site."""
    changes = compare(before, after)
    totals = " -> ".join(
        f"{label} ({_count(document['total_launches'], 'launch')})"
        for label, document in zip(labels, (before, after), strict=True)
    )
    if not changes:
        return f"kname census diff: {totals}: no change in launches per call site\n"
    kinds = ", ".join(
        f"{sum(c.kind == kind for c in changes)} {kind}"
        for kind in ("added", "removed", "changed")
        if any(c.kind == kind for c in changes)
    )
    rows = [
        (c.kind, f"{c.name} [{c.kernel or '?'}]", str(c.before), "->", str(c.after),
         f"({c.after - c.before:+d})")
        for c in changes
    ]  # fmt: skip
    return f"kname census diff: {totals}: {kinds}\n" + _columns(rows, right_aligned=(2, 4, 5))


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and os.replace."""
    directory = os.path.dirname(os.path.abspath(path))
    partial = os.path.join(
        directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    )
    # Mode 0o666 lets the umask decide, as for any file the program writes itself.
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


_exit_destination: str | None = None
_exit_registered = False
_owner_pid: int | None = None


def write_at_exit(destination: str) -> None:
    """At exit, print the census table on stderr (`-`) or write it as JSON to `destination`."""
    global _exit_destination, _exit_registered, _owner_pid
    # A relative path means relative to where the program started, even if it changes directory.
    _exit_destination = destination if destination == "-" else os.path.abspath(destination)
    if _owner_pid is None:
        inherited = os.environ.get(OWNER_VARIABLE)
        _owner_pid = int(inherited) if (inherited or "").isdigit() else os.getpid()
        os.environ[OWNER_VARIABLE] = str(_owner_pid)
    if not _exit_registered:
        import atexit

        # Registered once, however often install() runs; the latest destination wins.
        atexit.register(_write_now)
        _exit_registered = True


def cancel_at_exit() -> None:
    """Write no census at exit (the `kname` command itself must not overwrite the user's)."""
    global _exit_destination
    _exit_destination = None


def _write_now() -> None:
    destination = _exit_destination
    if destination is None:
        return
    try:
        document = census()
        if os.getpid() != _owner_pid:
            if not document["total_launches"]:
                return
            destination = _beside(destination)
        if destination == "-":
            sys.stderr.write(render_table(document))
            sys.stderr.flush()
        else:
            write_atomically(destination, render_json(document))
    except Exception as exc:  # never a traceback at exit
        from kname._warnings import warn_once

        reason = f"{type(exc).__name__}: {exc.strerror if isinstance(exc, OSError) else exc}"
        warn_once(
            "report",
            f"KNAME_REPORT={destination!r} could not be written ({reason}); "
            "the launch census was not saved",
        )


def _beside(destination: str) -> str:
    """Where a process beneath the owner writes: its own file, or stderr."""
    if destination == "-":
        return destination
    stem, suffix = os.path.splitext(destination)
    return f"{stem}.pid{os.getpid()}{suffix or '.json'}"


def _validate_site(site: Any, where: str) -> None:
    if not isinstance(site, dict):
        raise CensusError(f"{where} must be an object with {', '.join(SITE_FIELDS)}")
    for field in SITE_FIELDS:
        if field not in site:
            raise CensusError(f"{where} has no {field!r}")
    for field in ("name", "kernel", "lib"):
        if not isinstance(site[field], str):
            raise CensusError(f"{where}.{field} must be a string, not {site[field]!r}")
    for field in ("launches", "order"):
        if not _is_count(site[field]):
            raise CensusError(f"{where}.{field} must be a whole number >= 0, not {site[field]!r}")
    share = site["share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise CensusError(f"{where}.share must be a number from 0 to 1, not {share!r}")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _counts(document: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for site in document["sites"]:
        key = (site["name"], site["kernel"])
        counts[key] = counts.get(key, 0) + site["launches"]
    return counts


def _count(number: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("h") else "s")
    return f"{number} {noun if number == 1 else plural}"


def _columns(rows: list[tuple[str, ...]], right_aligned: tuple[int, ...]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
