"""Saved documents on disk: read one (every failure one line), write one atomically.

Only a regular file is read: a FIFO, a device or a directory is one line, never waited on. A
regular file is replaced whole, never left half-written; a device, a FIFO or /dev/stdout is
written in place. Which file a process writes (its own, or the owner's) is documents/owner.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from typing import Any

from kname.documents.schema import SCHEMAS, DocumentError, validate


def load(path: str, schemas: tuple[int, ...] = SCHEMAS) -> dict[str, Any]:
    """Read and validate a saved document of one of `schemas`; every failure is a one-line
    DocumentError."""
    return validate(read_json(path), path, schemas)


def read_json(path: str) -> Any:
    """The JSON value saved in `path`, not yet validated; a file that cannot be read or parsed,
    hostile ones included, is a one-line DocumentError. Only a regular file is read: a FIFO, a
    device or a directory is refused at once, never waited on."""
    try:
        text = _read_regular_file(path).decode("utf-8")
    except FileNotFoundError:
        raise DocumentError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DocumentError(f"{path}: cannot be read ({reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fault = f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    except RecursionError:
        fault = "nested too deeply"
    except ValueError:  # int() refuses numbers of over 4300 digits (sys.get_int_max_str_digits)
        fault = f"a number has more than {sys.get_int_max_str_digits()} digits"
    raise DocumentError(f"{path}: not valid JSON ({fault})")


def _read_regular_file(path: str) -> bytes:
    """The bytes of `path` (symlinks followed); DocumentError if it is not a regular file."""
    _refuse_unless_regular(path, os.stat(path).st_mode)  # a device is never even opened
    # Non-blocking, in case it became a FIFO since: opening one with no writer would wait.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        _refuse_unless_regular(path, os.fstat(descriptor).st_mode)
        return file.read()


def _refuse_unless_regular(path: str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise DocumentError(f"{path}: it is {_kind_of(mode)}, not a saved file kname can read")


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
             (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"))  # fmt: skip
    return next((kind for test, kind in kinds if test(mode)), "a special file")
