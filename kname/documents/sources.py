"""The source a saved document keeps, so that its page shows each line on another machine.

An optional field of either schema (kname.documents.schema), written after the totals:

    "sources": {                           the files the sites' names point at, hottest first
      "app.py": [                          a file by its `{path}`, as the names show it
        {"first": 2,                       a span of the file: the number of its first line,
         "lines": ["import numba", ...]}   and its lines, without their line endings
      ]
    }

What is kept: the lines within CONTEXT lines of each line a name points at (the call site and,
with KNAME_DEPTH above 1, its callers), as spans in order that neither overlap nor touch. A
line longer than MAX_LINE_CHARS is cut, ending in CUT. A document keeps at most MAX_LINES
lines: the files past that are left out whole (one line on stderr says so), and their lines
show on the page without source, as in a document written before this field.

A name points at a line by `{path}:{line}` (KNAME_FORMAT's default ends in it), in each part of
a call chain (`inner app.py:12 < outer app.py:30`): the path is the words before the colon, the
longest run of them that is a known file, else the last word.

Whose source is kept: only the program's Python. A file whose name ends in .py or .pyw, that is
a regular file (opened without waiting, so a FIFO or a device is never read) outside the
system's folders (SYSTEM_FOLDERS, after following links); or a notebook cell (`<cell 3>`) whose
text IPython put in linecache. Code that calls itself by any other name (an `eval` or a template
engine can name it `/etc/passwd`, a program read from a pipe is `/dev/fd/63`) keeps none.
KNAME_SOURCES=0 keeps none at all. A file is read once per process, and again only once it
changes.
"""

from __future__ import annotations

import io
import linecache
import os
import re
import stat
import tokenize
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from kname._warnings import warn_once
from kname.config import sources_kept
from kname.naming import CALLER_SEPARATOR

SOURCES = "sources"
CONTEXT = 20
MAX_LINE_CHARS = 400
MAX_LINES = 20_000
CUT = " [cut]"
PYTHON_SUFFIXES = (".py", ".pyw")
SYSTEM_FOLDERS = ("/etc/", "/proc/", "/sys/", "/dev/")
MAX_FILE_BYTES = 8 << 20  # a larger "source" is no program's: not read
# How kname.cells shows a cell's path.
_CELL = re.compile(r"<cell [0-9]+>")

# ":<digits>" ending a word: the line of a `{path}:{line}`.
_LINE_AT = re.compile(r":([0-9]{1,9})(?=\s|$)")


class Frame(NamedTuple):
    """One part of a call-site name: its text, and the line it points at (path "" if none)."""

    label: str
    path: str
    line: int


def chain(name: str, known: Collection[str] = ()) -> list[Frame]:
    """The parts of `name`, the call site first and then its callers, each with its line."""
    return [_frame(part, known) for part in name.split(CALLER_SEPARATOR)]


def lines_of(spans: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """{line number: text} of a file's kept spans."""
    return {
        span["first"] + offset: text for span in spans for offset, text in enumerate(span["lines"])
    }


def capture(names: Iterable[str], files: Mapping[str, str]) -> tuple[dict[str, list], int]:
    """(sources, how many files were left out) for the sites `names`, in the order given;
    `files` is {`{path}` as names show it: the file to read it from} (kname.naming)."""
    wanted = _pointed_lines(names, files)
    read = {}
    for path, lines in wanted.items():
        text = program_source(path, files[path])
        read[path] = {number: _cut(text[number - 1]) for number in _around(lines, len(text))}
    return _bounded(read)


def with_sources(document: dict[str, Any], files: Mapping[str, str]) -> dict[str, Any]:
    """`document` with the source of its sites' lines (none kept, or KNAME_SOURCES=0: as it
    was); never raises."""
    if not sources_kept():
        return document
    measure = "gpu_ns" if "total_gpu_ns" in document else "launches"
    ranked = sorted(document["sites"], key=lambda site: -site[measure])
    try:
        sources, left_out = capture((site["name"] for site in ranked), files)
    except Exception as exc:  # a file that cannot be read is no reason to lose the document
        warn_once("sources", f"the source of the call sites was not kept ({exc!r})")
        return document
    if left_out:
        warn_once(
            "sources:cap",
            f"the source of {left_out} file{'s' if left_out > 1 else ''} was not kept in the "
            f"saved document (at most {MAX_LINES} lines are); the page shows their lines "
            "without source",
        )
    return document | {SOURCES: sources} if sources else document


def _pointed_lines(names: Iterable[str], files: Mapping[str, str]) -> dict[str, set[int]]:
    """{path: the lines the parts of `names` point at in it}, for the paths in `files`. Each
    name is parsed once while the files known stay the same (a census is saved again and
    again, its page too)."""
    global _parsed
    known = frozenset(files)
    if _parsed[0] != known:
        _parsed = (known, {})  # one assignment: a thread saving at once sees one or the other
    parsed = _parsed[1]
    wanted: dict[str, set[int]] = {}
    for name in names:
        pointed = parsed.get(name)
        if pointed is None:
            frames = chain(name, known)
            pointed = tuple((frame.path, frame.line) for frame in frames if frame.path in known)
            if len(parsed) < MAX_PARSED:
                parsed[name] = pointed
        for path, line in pointed:
            wanted.setdefault(path, set()).add(line)
    return wanted


MAX_PARSED = 200_000  # names whose parse is kept (kname.counters counts at most so many sites)
# (the files known, {name: the (path, line) of each part whose path is known}).
_parsed: tuple[frozenset[str], dict[str, tuple[tuple[str, int], ...]]] = (frozenset(), {})


def program_source(shown: str, filename: str) -> Sequence[str]:
    """The lines of the program's source `filename`, shown in names as `shown` (a cell's
    `<cell 3>`); none where it is not the program's Python (see above)."""
    if _CELL.fullmatch(shown):
        entry = linecache.cache.get(filename)
        # IPython's entry for a cell: (size, None, lines, name); None: no file to check.
        return entry[2] if isinstance(entry, tuple) and len(entry) == 4 and entry[1] is None else ()
    if not filename.endswith(PYTHON_SUFFIXES):
        return ()
    try:
        facts = os.stat(filename)  # no open: a FIFO is never waited on
    except (OSError, ValueError):
        return ()
    key = (facts.st_dev, facts.st_ino, facts.st_size, facts.st_mtime_ns)
    kept = _read_files.get(filename)
    if kept is None or kept[0] != key:
        kept = _read_files[filename] = (key, _read_python_file(filename))
    return kept[1]


# {file name: ((device, inode, size, mtime), its lines)}: each file read once while unchanged.
_read_files: dict[str, tuple[tuple[int, ...], list[str]]] = {}


def _read_python_file(filename: str) -> list[str]:
    """The lines of a regular file outside the system's folders, decoded as Python decodes
    its source; [] for anything else."""
    real = os.path.realpath(filename)
    if real.startswith(SYSTEM_FOLDERS):
        return []
    try:
        descriptor = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        facts = os.fstat(descriptor)
        if not stat.S_ISREG(facts.st_mode) or facts.st_size > MAX_FILE_BYTES:
            return []
        chunks = []
        while chunk := os.read(descriptor, MAX_FILE_BYTES):
            chunks.append(chunk)
        data = b"".join(chunks)
    except OSError:
        return []
    finally:
        os.close(descriptor)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:  # a coding cookie naming no codec: not Python source
        return []
    text = io.TextIOWrapper(io.BytesIO(data), encoding, errors="replace")
    return text.readlines()  # universal newlines: the lines Python numbers


def merge_sources(documents: Iterable[Mapping[str, Any]]) -> dict[str, list]:
    """The sources of several documents as one: a line kept by several is the first one's."""
    read: dict[str, dict[int, str]] = {}
    for document in documents:
        keep_lines(read, document.get(SOURCES, {}))
    return bounded_sources(read)


def keep_lines(read: dict[str, dict[int, str]], sources: Mapping[str, Any]) -> None:
    """A sources field's lines added to `read` ({path: {line number: text}}), the lines
    `read` holds already kept as they are: how merges fold in one document at a time."""
    add_lines(read, {path: lines_of(spans) for path, spans in sources.items()})


def add_lines(read: dict[str, dict[int, str]], more: Mapping[str, Mapping[int, str]]) -> None:
    """The lines of `more` added to `read` (both {path: {line number: text}}), where `read`
    has none of that number already."""
    for path, lines in more.items():
        kept = read.setdefault(path, {})
        for number, text in lines.items():
            kept.setdefault(number, text)


def bounded_sources(read: Mapping[str, Mapping[int, str]]) -> dict[str, list]:
    """The sources field of lines gathered by keep_lines, files in order while MAX_LINES allows."""
    return _bounded(read)[0]


def validate_sources(value: Any, where: str) -> None:
    """Raise ValueError naming `where` unless `value` is a sources field as described above."""
    if not isinstance(value, dict):
        raise ValueError(f"{where}.{SOURCES} must be an object {{path: [spans]}}")
    kept = 0
    for path, spans in value.items():
        at = f"{where}.{SOURCES}[{path!r}]"
        if not isinstance(spans, list):
            raise ValueError(f"{at} must be a list of spans {{'first': n, 'lines': [...]}}")
        end = 0  # the number after the previous span's last line
        for span in spans:
            if not (
                isinstance(span, dict)
                and _is_line_number(span.get("first"))
                and isinstance(span.get("lines"), list)
                and all(isinstance(text, str) for text in span["lines"])
            ):
                raise ValueError(
                    f"{at} must be a list of spans {{'first': n, 'lines': [...]}}, with n a "
                    "line number from 1 to 999,999,999 and the lines strings"
                )
            if span["first"] <= end:
                raise ValueError(f"{at}: spans must be in order and must not overlap")
            end = span["first"] + len(span["lines"])
            kept += len(span["lines"])
            # The bounds a document is written within (capture): a file past them is hostile.
            if kept > MAX_LINES or any(len(text) > MAX_LINE_CHARS for text in span["lines"]):
                raise ValueError(
                    f"{where}.{SOURCES} keeps at most {MAX_LINES:,} lines of at most "
                    f"{MAX_LINE_CHARS} characters"
                )


def _frame(part: str, known: Collection[str]) -> Frame:
    for match in reversed(list(_LINE_AT.finditer(part))):
        before = part[: match.start()]
        start = 0
        while True:  # the longest run of words that is a known file
            if before[start:] in known:
                return Frame(part, before[start:], int(match.group(1)))
            space = before.find(" ", start)
            if space < 0:
                break
            start = space + 1
        if before[start:]:  # the last word
            return Frame(part, before[start:], int(match.group(1)))
    return Frame(part, "", 0)


def _around(lines: set[int], length: int) -> list[int]:
    """The line numbers within CONTEXT of `lines` and within 1..`length`, in order."""
    numbers: list[int] = []
    for line in sorted(lines):
        first = max(line - CONTEXT, numbers[-1] + 1 if numbers else 1)
        numbers.extend(range(first, min(line + CONTEXT, length) + 1))
    return numbers


def _cut(text: str) -> str:
    text = text.rstrip("\r\n")
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - len(CUT)] + CUT


def _bounded(read: Mapping[str, Mapping[int, str]]) -> tuple[dict[str, list], int]:
    """Spans of each file's lines, files in order while MAX_LINES allows; (sources, left out)."""
    sources: dict[str, list] = {}
    budget, left_out = MAX_LINES, 0
    for path, lines in read.items():
        if not lines:
            continue
        if len(lines) > budget:
            left_out += 1
            continue
        budget -= len(lines)
        sources[path] = _spans(lines)
    return sources, left_out


def _spans(lines: Mapping[int, str]) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    for number in sorted(lines):
        if spans and spans[-1]["first"] + len(spans[-1]["lines"]) == number:
            spans[-1]["lines"].append(lines[number])
        else:
            spans.append({"first": number, "lines": [lines[number]]})
    return spans


def _is_line_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 10**9
