"""Capture what a profiler would see: build, load and read the NVTX injection in nvtx_inject.c.

The library is loaded by NVTX itself (``NVTX_INJECTION64_PATH``) at a process's first NVTX
call, so captures always run in a fresh subprocess; see :func:`run_captured`. The same library
is the benchmarks' null tool: without ``KNAME_NVTX_LOG`` it takes every NVTX call and does
almost nothing (see :func:`null_env`).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from support import REPO, kname_setup

SOURCE = Path(__file__).with_name("nvtx_inject.c")
LIB_NAME = "libkname_nvtx_inject.so"
GLOBAL_DOMAIN = "<global>"
CFLAGS = ("-O2", "-Wall", "-Wextra")

_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}
_ESCAPE = re.compile(r"\\(.)")


class InjectionUnavailable(RuntimeError):
    """A C file cannot be built here (no C compiler; for compile_c, no NVTX headers)."""


@dataclass(frozen=True)
class Event:
    """One NVTX call as the injection logged it.

    ``message`` holds the text of push/mark/start events, the registered text of ``string``,
    the category name of ``category`` (whose id is then ``category``) and ``create`` or
    ``destroy`` for ``domain`` events.
    """

    kind: str
    domain: str
    tid: int
    message: str = ""
    category: int = 0
    color: int = 0
    range_id: int | None = None


@dataclass
class Capture:
    """All events of one captured run, in the order they were logged."""

    events: list[Event] = field(default_factory=list)

    def of(self, kind: str, domain: str | None = None) -> list[Event]:
        """Events of one kind, optionally only those of one domain."""
        return [e for e in self.events if e.kind == kind and domain in (None, e.domain)]

    def ranges(self, domain: str | None = None) -> list[str]:
        """Messages of pushed ranges, in push order."""
        return [e.message for e in self.of("push", domain)]

    def marks(self, domain: str | None = None) -> list[str]:
        """Messages of marks, in order."""
        return [e.message for e in self.of("mark", domain)]

    def registered_strings(self, domain: str | None = None) -> list[str]:
        """Texts registered with nvtxDomainRegisterString, in order."""
        return [e.message for e in self.of("string", domain)]

    def categories(self, domain: str | None = None) -> dict[int, str]:
        """Category names by id, as named with nvtxDomainNameCategory."""
        return {e.category: e.message for e in self.of("category", domain)}

    def domains(self) -> list[str]:
        """Names of the domains created, first creation order, without repeats."""
        created = (e.domain for e in self.of("domain") if e.message == "create")
        return list(dict.fromkeys(created))

    def stack_errors(self) -> list[str]:
        """Why push/pop do not match: a pop on an empty stack or ranges left open."""
        stacks: dict[tuple[str, int], list[str]] = defaultdict(list)
        errors = []
        for e in self.events:
            stack = stacks[e.domain, e.tid]
            if e.kind == "push":
                stack.append(e.message)
            elif e.kind == "pop" and not stack:
                errors.append(f"pop without push in domain {e.domain!r}, thread {e.tid}")
            elif e.kind == "pop":
                stack.pop()
        errors += [
            f"open ranges {stack!r} in domain {domain!r}, thread {tid}"
            for (domain, tid), stack in stacks.items()
            if stack
        ]
        return errors

    def balanced(self) -> bool:
        """True when, per domain and thread, pops never outnumber pushes and all ranges close."""
        return not self.stack_errors()

    def max_depth(self, domain: str | None = None) -> int:
        """Deepest push nesting seen on any one thread (of one domain, or of any domain)."""
        depth: dict[tuple[str, int], int] = defaultdict(int)
        deepest = 0
        for e in self.events:
            if domain not in (None, e.domain) or e.kind not in ("push", "pop"):
                continue
            depth[e.domain, e.tid] += 1 if e.kind == "push" else -1
            deepest = max(deepest, depth[e.domain, e.tid])
        return deepest


@functools.cache
def nvtx_include_dir() -> Path | None:
    """The directory holding ``nvtx3/`` as kname's build finds it (setup.py's own search: the
    installed nvidia-nvtx wheel's, else the CUDA toolkit's), else None."""
    try:
        found = kname_setup().nvtx_include_dir()
    except ImportError as exc:  # setup.py imports setuptools (Python 3.12+ venvs lack it)
        raise InjectionUnavailable(f"{exc.name} is not installed: pip install {exc.name}") from None
    return None if found is None else Path(found)


def _compiler() -> list[str] | None:
    """The C compiler command: $CC if set, else cc or gcc from PATH."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    path = shutil.which("cc") or shutil.which("gcc")
    return [path] if path else None


def build_injection_library(out_dir: Path) -> Path:
    """Compile nvtx_inject.c into ``out_dir`` and return the shared library's path. It needs no
    NVTX header: it takes the declarations of kname's NVTX tools (kname/_show_ranges_c/nvtx_tool.h).
    """
    tools = REPO / "kname" / "_show_ranges_c"
    return _compile(SOURCE, out_dir / LIB_NAME, tools, "-shared", "-fPIC", "-lpthread")


def compile_c(source: Path, output: Path, *flags: str) -> Path:
    """Compile ``source`` against the NVTX headers into ``output`` (``flags`` added).

    Raises InjectionUnavailable without a compiler or headers, RuntimeError when it fails.
    """
    include = nvtx_include_dir()
    if include is None:
        raise InjectionUnavailable("no NVTX headers: install nvidia-nvtx or set CUDA_HOME")
    return _compile(source, output, include, *flags)


def _compile(source: Path, output: Path, include: Path, *flags: str) -> Path:
    compiler = _compiler()
    if compiler is None:
        raise InjectionUnavailable("no C compiler: set CC or put cc/gcc on PATH")
    if shutil.which(compiler[0]) is None:
        raise InjectionUnavailable(f"C compiler {compiler[0]!r} not found")
    output.parent.mkdir(parents=True, exist_ok=True)
    # Build under a unique name then rename, so concurrent builders never load half a file.
    partial = output.with_name(f".{uuid.uuid4().hex}{output.suffix}")
    cmd = [*compiler, *CFLAGS, f"-I{include}", str(source), "-o", str(partial), *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building {source.name} failed:\n{shlex.join(cmd)}\n{done.stderr}")
    partial.replace(output)
    return output


def capture_env(lib: Path, log: Path) -> dict[str, str]:
    """Environment variables that make a new process log its NVTX events to ``log``."""
    return {"NVTX_INJECTION64_PATH": str(lib), "KNAME_NVTX_LOG": str(log)}


def null_env(lib: Path) -> dict[str, str | None]:
    """Environment variables that attach ``lib`` as a null tool: NVTX calls reach it, it counts
    push/pop depth per thread and hands out handles, and logs nothing (None: remove)."""
    return {"NVTX_INJECTION64_PATH": str(lib), "KNAME_NVTX_LOG": None}


def _unescape(text: str) -> str:
    """Undo the C side's escaping of backslash, tab, newline and CR."""
    return _ESCAPE.sub(lambda m: _UNESCAPES.get(m[1], m[0]), text)


def parse_line(line: str) -> Event:
    """Parse one log line (see the format at the top of nvtx_inject.c)."""
    kind, domain, tid, *rest = line.split("\t")
    head = (kind, _unescape(domain), int(tid))
    if kind in ("push", "mark", "start"):
        range_id = int(rest[3]) if len(rest) > 3 else None
        return Event(*head, _unescape(rest[0]), int(rest[1]), int(rest[2], 16), range_id)
    if kind == "category":
        return Event(*head, _unescape(rest[1]), int(rest[0]))
    if kind == "end":
        return Event(*head, range_id=int(rest[0]))
    return Event(*head, _unescape(rest[0]) if rest else "")


def parse_lines(lines: Iterable[str]) -> Capture:
    """Parse log lines, skipping empty ones."""
    return Capture([parse_line(line) for line in lines if line])


def read_capture(log: Path) -> Capture:
    """Parse a log written by the injection library."""
    text = log.read_bytes().decode("utf-8", errors="replace")
    return parse_lines(text.split("\n"))


def run_captured(
    args: list[str],
    lib: Path,
    tmp_path: Path,
    env: Mapping[str, str | None] | None = None,
    **kw,
) -> tuple[subprocess.CompletedProcess, Capture]:
    """Run ``args`` with NVTX capture on and return the finished process and its events.

    ``env`` is added to a copy of os.environ after the capture variables; a None value
    removes the variable. Output is captured as text unless ``kw`` says otherwise.
    """
    log = tmp_path / f"nvtx-{uuid.uuid4().hex}.log"
    full_env: dict[str, str | None] = {**os.environ, **capture_env(lib, log), **(env or {})}
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("check", False)
    env_vars = {k: v for k, v in full_env.items() if v is not None}
    done = subprocess.run(args, env=env_vars, **kw)
    return done, read_capture(log) if log.exists() else Capture()
