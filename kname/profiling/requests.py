"""What asks a running process for a profile window, read only from what its user owns.

Two ways in (ondemand.py serves both):
- `kname attach PID` writes a request file in the user's private runtime folder
  (runtime_folder(): `$XDG_RUNTIME_DIR/kname`, else `/tmp/kname-<uid>`, mode 0700), named for
  the process (`<pid>.request`), then sends it SIGUSR2; the process answers in `<pid>.reply`.
- KNAME_PROFILE_TRIGGER names a file every rank of a job can see: touching it (or writing
  `duration=60` into it) opens the same window in each.

Either is refused unless it is the process's user's own: a regular file (never a link), owned by
the effective user, writable by no one else, in a folder that is the user's own too (for the
runtime folder) or writable by no one else but its owner and root's sticky rule (for a trigger).
Nothing is read from it but `key=value` lines of KEYS, each checked (parse_request).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import NamedTuple

from kname.config import parse_seconds
from kname.rank_paths import template_problem

KEYS = ("duration", "json", "trace", "html")
DEFAULT_SECONDS = 30.0
MAX_SECONDS = 86_400.0  # a window of a day at most
MAX_BYTES = 4096  # a request or trigger is a few lines
MAX_PATH = 4096
REQUEST, REPLY = "request", "reply"


class RequestRefused(ValueError):
    """A request or trigger that is not read: the message is one line saying why."""


class Request(NamedTuple):
    """A profile window asked for: how long, and the files to write (absolute templates with
    kname's placeholders, or None). A NamedTuple: start-up imports no dataclasses."""

    duration: float = DEFAULT_SECONDS
    json: str | None = None
    trace: str | None = None
    html: str | None = None

    def outputs(self) -> dict[str, str]:
        """{kind: path template} of the files asked for."""
        paths = {"json": self.json, "trace": self.trace, "html": self.html}
        return {kind: path for kind, path in paths.items() if path}

    def text(self) -> str:
        """The request as its file holds it (parse_request reads it back)."""
        lines = [f"duration={self.duration:g}"]
        lines += [f"{kind}={path}" for kind, path in self.outputs().items()]
        return "\n".join(lines) + "\n"


def parse_request(text: str, base: str, origin: str) -> Request:
    """The Request in `text` (lines of `key=value`, blank lines and `#` comments allowed), its
    relative paths taken from the folder `base`; RequestRefused names `origin` and what was
    wrong. An empty text is the defaults."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not equals or key not in KEYS:
            raise RequestRefused(
                f"{origin}: line {number} is not one of {', '.join(k + '=' for k in KEYS)} "
                f"({_shown(line)})"
            )
        if key in values:
            raise RequestRefused(f"{origin}: {key}= is given twice")
        values[key] = value
    duration = _duration(values.pop("duration", None), origin)
    paths = {key: _output_path(key, value, base, origin) for key, value in values.items()}
    if len(set(paths.values())) < len(paths):
        raise RequestRefused(f"{origin}: two outputs name one file ({_shown(str(paths))})")
    return Request(duration, **paths)


def _duration(text: str | None, origin: str) -> float:
    if text is None:
        return DEFAULT_SECONDS
    seconds = parse_seconds(text)
    if seconds is None or seconds > MAX_SECONDS:
        raise RequestRefused(
            f"{origin}: duration={_shown(text)} is not a number of seconds above 0 and at most "
            f"{MAX_SECONDS:g} (such as 30 or 0.5)"
        )
    return seconds


def _output_path(key: str, text: str, base: str, origin: str) -> str:
    """An output path template, made absolute from `base`; its placeholders checked."""
    if not text or text == "-" or len(text) > MAX_PATH or not text.isprintable():
        raise RequestRefused(
            f"{origin}: {key}={_shown(text)} is not a file path (printable, at most {MAX_PATH} "
            "characters, not -)"
        )
    problem = template_problem(f"{origin}: {key}", text)
    if problem is not None:
        raise RequestRefused(problem)
    return os.path.normpath(os.path.join(base, text))


def _shown(text: str) -> str:
    """`text` cut to 80 characters, unprintable characters escaped: safe on one line."""
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


# --- Whose files these are --------------------------------------------------------------------


def refusal(status: os.stat_result, what: str, uid: int | None = None) -> str | None:
    """Why the file or folder `what`, of `status` (an lstat: a link is itself), is not the user's
    own to act on; None where it is: regular (or a folder), owned by `uid` (default: the
    effective user), writable by no one else."""
    uid = os.geteuid() if uid is None else uid
    mode = status.st_mode
    if stat.S_ISLNK(mode):
        return f"{what} is a symbolic link (name the file itself)"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"{what} is not a regular file"
    if status.st_uid != uid:
        return f"{what} is owned by uid {status.st_uid}, not by this process's user (uid {uid})"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{what} is writable by others (mode {stat.S_IMODE(mode):o}; chmod go-w it)"
    return None


def read_owned(path: str, what: str) -> str:
    """The text of the regular file `path` (at most MAX_BYTES), read only if refusal() finds
    nothing against it, checked on the descriptor opened (no link followed, nothing waited on);
    RequestRefused otherwise, naming `what`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        before = os.lstat(path)
        problem = refusal(before, what)
        if problem is None and stat.S_ISDIR(before.st_mode):
            problem = f"{what} is a folder, not a file"
        if problem:
            raise RequestRefused(problem)
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise RequestRefused(f"{what} cannot be read ({exc.strerror or exc})") from None
    try:
        status = os.fstat(descriptor)
        problem = refusal(status, what)
        if problem is None and (status.st_ino, status.st_dev) != (before.st_ino, before.st_dev):
            problem = f"{what} changed while it was opened"
        if problem:
            raise RequestRefused(problem)
        data = os.read(descriptor, MAX_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_BYTES:
        raise RequestRefused(f"{what} is longer than {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestRefused(f"{what} is not UTF-8 text") from None


def runtime_folder(make: bool = False, environ: Mapping[str, str] | None = None) -> str:
    """The user's private folder for attach requests and replies: `$XDG_RUNTIME_DIR/kname` where
    that is set in `environ` (default: this process's; `kname attach` reads the target's), else
    `/tmp/kname-<uid>`; made (mode 0700) with `make`. RequestRefused where it is not the user's
    own (another user made it first, or it is a link)."""
    folder = runtime_path(environ)
    if make:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RequestRefused(f"{folder} cannot be made ({exc.strerror or exc})") from None
    try:
        status = os.lstat(folder)
    except OSError as exc:
        raise RequestRefused(f"{folder} cannot be read ({exc.strerror or exc})") from None
    problem = refusal(status, f"the runtime folder {folder}")
    if problem is None and not stat.S_ISDIR(status.st_mode):
        problem = f"the runtime folder {folder} is not a folder"
    if problem is None and stat.S_IMODE(status.st_mode) & 0o077:
        problem = f"the runtime folder {folder} is open to others (chmod 700 it)"
    if problem:
        raise RequestRefused(problem)
    return folder


def runtime_path(environ: Mapping[str, str] | None = None) -> str:
    """Where runtime_folder() is, unchecked."""
    runtime = (os.environ if environ is None else environ).get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "kname")
    return os.path.join("/tmp", f"kname-{os.geteuid()}")


def exchange_path(folder: str, pid: int, kind: str) -> str:
    """The request (or reply) file of process `pid` in the runtime folder."""
    return os.path.join(folder, f"{pid}.{kind}")
