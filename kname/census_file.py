"""The census document: its JSON layout, table, diff, and saved files (read and written).

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

A site that launched nothing is left out.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

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


def document_of(rows: Mapping[tuple[str, str, str], int]) -> dict[str, Any]:
    """The census document of launches per (name, kernel, library), in the rows' order."""
    total = sum(rows.values())
    sites = [
        {"name": name, "kernel": kernel, "lib": lib, "launches": launches,
         "share": round(launches / total, 6), "order": order}
        for order, ((name, kernel, lib), launches) in enumerate(rows.items(), 1)
    ]  # fmt: skip
    return {"kname": __version__, "schema": SCHEMA, "sites": sites, "total_launches": total}


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
    origin = f" ({printable(source)}, written by kname {printable(document.get('kname', '?'))})"
    origin = origin if source else ""
    counted = f"{count_of(total, 'launch')} from {count_of(len(sites), 'call site')}"
    heading = f"kname census{origin}: {counted}"
    if not sites:
        return heading + "\n"
    header = ("call site", "kernel", "library", "launches", "share", "first seen")
    rows = [
        (printable(s["name"]), printable(s["kernel"] or "?"), printable(s["lib"] or "?"),
         str(s["launches"]), f"{100 * s['share']:.1f}%", str(s["order"]))
        for s in sites
    ]  # fmt: skip
    return heading + "\n" + columns([header, *rows], right_aligned=(3, 4, 5))


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
    if not _iscount_of(total):
        raise CensusError(f"{source}: 'total_launches' must be a whole number >= 0, not {total!r}")
    return document


def load(path: str) -> dict[str, Any]:
    """Read and validate a saved census; every failure is a one-line CensusError."""
    return validate(read_json(path), path)


def read_json(path: str) -> Any:
    """The JSON value saved in `path` (a census of any schema, not yet validated); a file that
    cannot be read or parsed, hostile ones included, is a one-line CensusError."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        raise CensusError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CensusError(f"{path}: cannot be read ({reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fault = f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    except RecursionError:
        fault = "nested too deeply"
    except ValueError:  # int() refuses numbers of over 4300 digits (sys.get_int_max_str_digits)
        fault = f"a number has more than {sys.get_int_max_str_digits()} digits"
    raise CensusError(f"{path}: not valid JSON ({fault})")


def compare(
    before: Mapping[str, Any], after: Mapping[str, Any], ignore_lines: bool = False
) -> list[Change]:
    """Launch counts per call site (name and kernel) that differ: added, removed, changed.

    With `ignore_lines`, the number after each `:` in a name (the line of `{path}:{line}`) is
    `*`: launches are compared per function, file and kernel, so a moved line is no change.
    """
    old, new = _counts(before, ignore_lines), _counts(after, ignore_lines)
    changes = [Change("added", *key, 0, new[key]) for key in new if key not in old]
    changes += [Change("removed", *key, old[key], 0) for key in old if key not in new]
    changes += [
        Change("changed", *key, old[key], new[key])
        for key in new
        if key in old and old[key] != new[key]
    ]
    return changes


def render_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str],
    ignore_lines: bool = False,
) -> str:
    """`compare` as text: a summary line, then one aligned line per changed call site."""
    changes = compare(before, after, ignore_lines)
    totals = " -> ".join(
        f"{printable(label)} ({count_of(document['total_launches'], 'launch')})"
        for label, document in zip(labels, (before, after), strict=True)
    )
    if not changes:
        ignored = " (lines ignored)" if ignore_lines else ""
        return f"kname census diff: {totals}: no change in launches per call site{ignored}\n"
    kinds = ", ".join(
        f"{sum(c.kind == kind for c in changes)} {kind}"
        for kind in ("added", "removed", "changed")
        if any(c.kind == kind for c in changes)
    )
    rows = [
        (c.kind, f"{printable(c.name)} [{printable(c.kernel or '?')}]", str(c.before), "->",
         str(c.after), f"({c.after - c.before:+d})")
        for c in changes
    ]  # fmt: skip
    return f"kname census diff: {totals}: {kinds}\n" + columns(rows, right_aligned=(2, 4, 5))


def write_atomically(path: str, text: str) -> None:
    """Write `text` to `path` without ever leaving it half-written or replacing what it is.

    A regular file (or a new one) is replaced atomically, through a temporary file beside it,
    after following symlinks (the link stays a link) and keeping the file's permission bits. A
    character device or a FIFO, or a path through /proc/<pid>/fd (/dev/stdout), is written in
    place, appended, never truncated. Anything else (a directory, a block device, a socket) is
    refused with an OSError; so is a FIFO nobody reads, at once rather than waiting.
    """
    mode = _existing_mode(path)
    special = mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode))
    if special or _through_proc(path):
        _write_in_place(path, text)
        return
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, f"it is {_kind_of(mode)}, not a file kname can write")
    target = os.path.realpath(path)
    directory, name = os.path.split(target)
    partial = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    # Mode 0o666 lets the umask decide, as for any file the program writes itself.
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if mode is not None:
            os.fchmod(descriptor, stat.S_IMODE(mode))
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def _existing_mode(path: str) -> int | None:
    """The mode of what `path` names, symlinks followed; None if nothing is there yet."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def _through_proc(path: str) -> bool:
    """True if `path` is, or links through, /proc (/dev/stdout -> /proc/self/fd/1 -> ...)."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if current == "/proc" or current.startswith("/proc/"):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.join(os.path.dirname(current), os.readlink(current))
        current = os.path.abspath(current)
    return False


def _write_in_place(path: str, text: str) -> None:
    """Append `text` to a device, FIFO or already open file, as `echo text >> path` would."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_NONBLOCK
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads: waiting could hang the exit
            raise OSError(errno.ENXIO, "it is a FIFO with no reader") from None
        raise
    try:
        # Non-blocking only to open: a slow reader must get every byte.
        os.set_blocking(descriptor, True)
        data = text.encode("utf-8")
        while data:
            data = data[os.write(descriptor, data) :]
    finally:
        os.close(descriptor)


def _kind_of(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((kind for test, kind in kinds if test(mode)), "a special file")


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
        if not _iscount_of(site[field]):
            raise CensusError(f"{where}.{field} must be a whole number >= 0, not {site[field]!r}")
    share = site["share"]
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise CensusError(f"{where}.share must be a number from 0 to 1, not {share!r}")


def _iscount_of(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# A line number: digits after a colon, ending the name or followed by a non-word character.
_LINE = re.compile(r"(?<=:)[0-9]+\b")


def _counts(document: Mapping[str, Any], ignore_lines: bool) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for site in document["sites"]:
        name = _LINE.sub("*", site["name"]) if ignore_lines else site["name"]
        key = (name, site["kernel"])
        counts[key] = counts.get(key, 0) + site["launches"]
    return counts


def printable(text: object) -> str:
    """`text` safe for a terminal: control characters (ANSI escapes, NUL, newlines) and other
    unprintable ones (lone surrogates) written as Python escapes, e.g. \\x1b."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def count_of(number: int, noun: str) -> str:
    """`1 launch`, `3 launches`, `0 call sites`, `2 processes`."""
    plural = noun + ("es" if noun.endswith(("h", "s")) else "s")
    return f"{number} {noun if number == 1 else plural}"


def columns(rows: list[tuple[str, ...]], right_aligned: tuple[int, ...]) -> str:
    """`rows` of cells as a plain-text table: columns two spaces apart, those whose index is in
    `right_aligned` aligned right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
