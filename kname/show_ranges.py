"""`kname run --show-ranges`: run a program under kname's own small NVTX tool and print the
ranges it really emitted, to check a setup on any machine, without Nsight.

The tool is show_ranges.c, built on NVTX's injection interface, the one Nsight's tools use:
NVTX loads it at the program's first NVTX call when NVTX_INJECTION64_PATH names it, and it
appends a line per range event to a log. NVTX loads a tool only as a shared library, by path,
so there is no pure-Python way: the C file ships in the package, with the NVTX declarations it
includes (nvtx_tool.h), and is compiled on first use with the machine's C compiler ($CC, else
cc, gcc or clang; no NVTX headers needed) into a cache folder ($XDG_CACHE_HOME/kname, else
~/.cache/kname), then reused.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).with_name("show_ranges.c")
HEADER = SOURCE.with_name("nvtx_tool.h")  # the NVTX declarations it includes, installed beside it
LOG_VARIABLE = "_KNAME_RANGES_LOG"
INJECTION_VARIABLE = "NVTX_INJECTION64_PATH"
SHOWN = 20  # rows of the table; the rest are summed up in one line


class ViewerUnavailable(RuntimeError):
    """The viewer cannot be built here; the message is one line saying what to do."""


@dataclass
class Ranges:
    """What a log holds: ranges per (domain, name), the processes seen, ranges left open."""

    counts: Counter = field(default_factory=Counter)  # (domain, name) -> ranges, first seen first
    processes: set[int] = field(default_factory=set)  # pids that used NVTX (forked ones too)
    open_ranges: Counter = field(default_factory=Counter)  # domain -> ranges never closed


def build(cache: Path | None = None) -> Path:
    """The viewer's shared library, compiled now unless the cache already holds this build."""
    compiler = _compiler()
    source = SOURCE.read_bytes() + HEADER.read_bytes()
    digest = hashlib.sha256(source + " ".join(compiler).encode()).hexdigest()[:16]
    cache = cache or _cache_folder()
    library = cache / f"libkname_show_ranges-{digest}.so"
    if library.is_file():
        return library
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        cache = Path(tempfile.mkdtemp(prefix="kname-"))
        library = cache / library.name
    # Built under a name of its own, then renamed: two runs never load half a file.
    partial = cache / f".{library.name}.{os.getpid()}.tmp"
    command = [*compiler, "-shared", "-fPIC", "-O2", str(SOURCE), "-o", str(partial)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ViewerUnavailable(
            f"cannot run the C compiler {compiler[0]!r} ({exc.strerror}): install cc, gcc or "
            "clang, or set CC"
        ) from None
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        first = next((line for line in done.stderr.splitlines() if line.strip()), "no output")
        raise ViewerUnavailable(f"compiling its NVTX viewer failed: {shlex.join(command)}: {first}")
    partial.replace(library)
    return library


def run(executable: str, program: list[str], environ: dict[str, str], library: Path) -> int:
    """Run `program` with the viewer attached, then print its ranges on stderr.

    Returns the program's exit status; a program killed by a signal kills this process with it.
    """
    descriptor, log = tempfile.mkstemp(prefix="kname-ranges-", suffix=".log")
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
    if status < 0:  # die of the same signal, as `kname run` without --show-ranges would
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
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
    from kname.census_file import printable

    total = sum(ranges.counts.values())
    processes = len(ranges.processes)
    if not processes:
        return (
            "kname --show-ranges: no NVTX call was made (NVTX never loaded the viewer): "
            "nothing was named; see kname doctor\n"
        )
    if not total:
        census = " (KNAME_MODE=census emits none)" if environ.get("KNAME_MODE") == "census" else ""
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
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    raise ViewerUnavailable(
        "needs a C compiler once, to build its NVTX viewer (kname/show_ranges.c): install cc, "
        "gcc or clang, or set CC"
    )


def _cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kname"


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
