"""`kname run --show-ranges`: run a program under kname's own small NVTX tool and print the
ranges it really emitted, to check a setup on any machine, without Nsight.

The tool is show_ranges.c, built on NVTX's injection interface, the one Nsight's tools use:
NVTX loads it at the program's first NVTX call when NVTX_INJECTION64_PATH names it, and it
appends a line per range event to a log. NVTX loads a tool only as a shared library, by path,
so there is no pure-Python way: the C file ships in the package, with the NVTX declarations it
includes (nvtx_tool.h), and is compiled on first use with the machine's C compiler ($CC, else cc,
gcc or clang; no NVTX headers needed) into a cache folder ($XDG_CACHE_HOME/kname, else
~/.cache/kname), then reused. The file's name carries a digest of the source, its headers and the
compile command, and a checksum file kname wrote beside it vouches for its bytes.

The cache is trusted only where it is this user's alone: the folder, the library and its
checksum each owned by the effective user, writable by no one else, and not a symlink (checked
on the descriptors opened, beneath the folder's). NVTX then loads the library through
/proc/<pid>/fd/N, the very file whose bytes the checksum was checked against, kept open while
the program runs. Else the cache is not used (one line says why) and the viewer is built for
the run, in a private folder (owner-only, removed afterwards).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kname import build_cache
from kname.config import KNAME_MODE

SOURCE = Path(__file__).parent / "_show_ranges_c" / "show_ranges.c"
LOG_VARIABLE = "_KNAME_RANGES_LOG"
INJECTION_VARIABLE = "NVTX_INJECTION64_PATH"
FLAGS = ("-shared", "-fPIC", "-O2")
SHOWN = 20  # rows of the table; the rest are summed up in one line


class ViewerUnavailable(RuntimeError):
    """The viewer cannot be built here; the message is one line saying what to do."""


@dataclass
class Ranges:
    """What a log holds: ranges per (domain, name), the processes seen, ranges left open."""

    counts: Counter = field(default_factory=Counter)  # (domain, name) -> ranges, first seen first
    processes: set[int] = field(default_factory=set)  # pids that used NVTX (forked ones too)
    open_ranges: Counter = field(default_factory=Counter)  # domain -> ranges never closed


def main(executable: str, program: list[str], environ: dict[str, str]) -> int:
    """Run `program` under the viewer (built first where the cache holds no verified build),
    then print its ranges on stderr.

    Returns the program's exit status; a program killed by a signal kills this process with it.
    Raises ViewerUnavailable, before the program runs, where the viewer cannot be built.
    """
    with viewer() as library:
        status = run(executable, program, environ, library)
    if status < 0:  # die of the same signal, as `kname run` without --show-ranges would
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


@contextmanager
def viewer(cache: Path | None = None) -> Iterator[Path]:
    """The viewer's shared library: the cache's build where the cache is trusted and the
    checksum vouches for it (as /proc/<pid>/fd/N of the very file checked, open while the
    program runs), else one compiled now, kept in the cache where it is trusted (one line
    where it cannot be), and loaded from there or from a private folder of this run."""
    compiler = _compiler()
    folder = cache or build_cache.cache_folder()
    name = f"libkname_show_ranges-{_build_digest(compiler)}.so"
    with ExitStack() as stack:
        library, _ = build_cache.cached_or_built(
            folder, name, stack, lambda: _build_for_this_run(compiler, name, stack),
            _say_not_trusted, _say_not_kept,
        )  # fmt: skip
        yield library


def _build_for_this_run(compiler: list[str], name: str, stack: ExitStack) -> Path:
    """The viewer compiled into a private folder (owner-only), removed when `stack` closes."""
    try:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="kname-show-ranges-"))
    except OSError as exc:
        raise _no_temporary_file("a folder to build its NVTX viewer in", exc) from None
    return _compile(compiler, Path(folder) / name)


def _no_temporary_file(what: str, exc: OSError) -> ViewerUnavailable:
    # Python tries TMPDIR, then /tmp and others: this is where none of them could be written.
    return ViewerUnavailable(
        f"cannot make {what} ({exc.strerror}): set TMPDIR to a writable folder"
    )


def _compile(compiler: list[str], out: Path) -> Path:
    command = [*compiler, *FLAGS, str(SOURCE), "-o", str(out)]
    try:
        failed = build_cache.compile_library(command, out)
    except OSError as exc:
        raise ViewerUnavailable(
            f"cannot run the C compiler {compiler[0]!r} ({exc.strerror}): install cc, gcc or "
            "clang, or set CC"
        ) from None
    if failed is not None:
        raise ViewerUnavailable(
            f"compiling its NVTX viewer failed: {shlex.join(command)}: {failed}"
        )
    return out


def _say_not_trusted(folder: Path, problem: str) -> None:
    sys.stderr.write(
        f"kname run --show-ranges: its cache {folder} is not used ({problem}), so its NVTX "
        "viewer is built at every run: make the folder yours alone (chmod go-w), or set "
        "XDG_CACHE_HOME to one that is\n"
    )


def _say_not_kept(folder: Path, reason: str | None, where: object) -> None:
    sys.stderr.write(
        f"kname run --show-ranges: cannot keep its NVTX viewer in {folder} ({reason}: "
        f"{where}), so it is built at every run: set XDG_CACHE_HOME to a writable folder\n"
    )


_LOCAL_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def _build_digest(compiler: list[str]) -> str:
    """What a build is made of: show_ranges.c, the headers it includes from beside it, and the
    compile command; any change gives a new file name in the cache."""
    digest = hashlib.sha256("\0".join([*compiler, *FLAGS]).encode())
    seen: set[Path] = set()
    todo = [SOURCE]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue  # a missing header is the compiler's to report
        seen.add(path)
        text = path.read_bytes()
        digest.update(b"\0" + path.name.encode() + b"\0" + text)
        todo += [SOURCE.parent / name.decode() for name in _LOCAL_INCLUDE.findall(text)]
    return digest.hexdigest()[:16]


def run(executable: str, program: list[str], environ: dict[str, str], library: Path) -> int:
    """Run `program` with the viewer `library` attached, then print its ranges on stderr.

    Returns the program's exit status (negative: the signal that killed it). Raises
    ViewerUnavailable, before the program runs, where no log file can be made.
    """
    try:
        descriptor, log = tempfile.mkstemp(prefix="kname-ranges-", suffix=".log")
    except OSError as exc:
        raise _no_temporary_file("its log file", exc) from None
    os.close(descriptor)
    try:
        environ = {**environ, INJECTION_VARIABLE: str(library), LOG_VARIABLE: log}
        # Ctrl-C reaches the program (same process group); this process waits to report.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            status = subprocess.call(program, executable=executable, env=environ)
        finally:
            signal.signal(signal.SIGINT, previous)
        sys.stderr.write(render(read_log(log), environ))
        sys.stderr.flush()
    finally:
        os.unlink(log)
    return status


def read_log(path: str) -> Ranges:
    """Parse the viewer's log (see show_ranges.c for its lines)."""
    ranges = Ranges()
    depth: Counter = Counter()  # (pid, tid, domain) -> pushes not yet popped
    started: dict[tuple[int, str, str], str] = {}  # (pid, domain, id) of ranges not yet ended
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            kind, *fields = line.rstrip("\n").split("\t")
            if fields and fields[0].isdigit():
                # A forked child logs through the parent's viewer, without an init line.
                ranges.processes.add(int(fields[0]))
            if kind in ("push", "start") and len(fields) >= 4:
                pid, tid, domain, name = fields[:4]
                ranges.counts[_unescape(domain), _unescape(name)] += 1
                if kind == "push":
                    depth[pid, tid, domain] += 1
                elif len(fields) > 4:
                    started[int(pid), domain, fields[4]] = domain
            elif kind == "pop" and len(fields) >= 3:
                key = tuple(fields[:3])
                depth[key] = max(depth[key] - 1, 0)  # a pop without a push closes nothing
            elif kind == "end" and len(fields) >= 4:
                started.pop((int(fields[0]), fields[2], fields[3]), None)
    for (_, _, domain), left in depth.items():
        if left:
            ranges.open_ranges[_unescape(domain)] += left
    for domain in started.values():
        ranges.open_ranges[_unescape(domain)] += 1
    return ranges


def render(ranges: Ranges, environ: dict[str, str]) -> str:
    """The report: a heading, a table of ranges per domain and name, and what was left open."""
    from kname.documents.text import printable

    total = sum(ranges.counts.values())
    processes = len(ranges.processes)
    if not processes:
        return (
            "kname --show-ranges: no NVTX call was made (NVTX never loaded the viewer): "
            "nothing was named; see kname doctor\n"
        )
    if not total:
        census = " (KNAME_MODE=census emits none)" if environ.get(KNAME_MODE) == "census" else ""
        return (
            f"kname --show-ranges: NVTX was used in {_count(processes, 'process')}, but no range "
            f"was pushed{census}; see kname doctor\n"
        )
    heading = (
        f"kname --show-ranges: {_count(total, 'NVTX range')} in "
        f"{_count(len({d for d, _ in ranges.counts}), 'domain')}, from "
        f"{_count(processes, 'process')}"
    )
    top = sorted(ranges.counts.items(), key=lambda item: -item[1])[:SHOWN]
    rows = [("domain", "range", "count")]
    rows += [(printable(domain), printable(name), str(n)) for (domain, name), n in top]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [heading]
    lines += [f"{d:<{widths[0]}}  {r:<{widths[1]}}  {n:>{widths[2]}}" for d, r, n in rows]
    rest = ranges.counts.total() - sum(n for _, n in top)
    if rest:
        others = len(ranges.counts) - len(top)
        lines.append(f"... and {_count(rest, 'range')} of {_count(others, 'other name')}")
    for domain, left in ranges.open_ranges.items():
        lines.append(f"{_count(left, 'range')} of domain {printable(domain)} never closed")
    return "\n".join(lines) + "\n"


def _compiler() -> list[str]:
    try:
        command = build_cache.compiler_command("CC", ("cc", "gcc", "clang"))
    except ValueError as exc:  # unbalanced quotes
        raise ViewerUnavailable(
            f"CC={os.environ.get('CC', '')!r} is not a command line ({exc}): set CC to a C "
            "compiler, e.g. CC=gcc, or unset it"
        ) from None
    if command is not None:
        return command
    raise ViewerUnavailable(
        "needs a C compiler once, to build its NVTX viewer "
        "(kname/_show_ranges_c/show_ranges.c): install cc, gcc or clang, or set CC"
    )


_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def _unescape(text: str) -> str:
    """Undo the C side's escaping of backslash, tab, newline and CR."""
    out, chars = [], iter(text)
    for c in chars:
        if c == "\\":
            escaped = next(chars, "")
            c = _UNESCAPES.get(escaped, c + escaped)  # anything else is kept as it was
        out.append(c)
    return "".join(out)


def _count(number: int, noun: str) -> str:
    plural = noun + ("es" if noun.endswith("s") else "s")
    return f"{number} {noun if number == 1 else plural}"
