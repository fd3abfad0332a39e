"""Saved documents on disk: read one (every failure one line), write one atomically.

Only a regular file is read: a FIFO, a device or a directory is one line, never waited on. A
regular file is replaced whole, never left half-written; a device, a FIFO or /dev/stdout is
written in place; nothing is written through a symbolic link. Which file a process writes (its
own, or the owner's) is documents/owner.py.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from typing import Any

from kname.documents.schema import PYTEST_REPORT, SCHEMAS, DocumentError, validate


def load(path: str, kinds: tuple[int | str, ...] = SCHEMAS) -> dict[str, Any]:
    """The saved document at `path`, validated whole: a census or profile of one of the schemas
    in `kinds`, or the pytest plugin's report where `kinds` has PYTEST_REPORT. Every failure
    (a hostile file too) is a one-line DocumentError naming `path`. The one way kname reads a
    saved file: `kname report`, the pytest plugin and the tests all come here."""
    value = read_json(path)
    schemas = tuple(kind for kind in kinds if isinstance(kind, int))
    if PYTEST_REPORT in kinds:
        # Here, not at the top: the census written at exit imports this module to write, and
        # needs none of the report's (merge, build).
        from kname.documents.pytest_report import is_pytest_report, validate_pytest_report

        if is_pytest_report(value) or not schemas:
            return validate_pytest_report(value, path)
    return validate(value, path, schemas)


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
    """Write `text` to `path` without ever leaving it half-written, replacing what it is, or
    writing through a link.

    A regular file (or a new one) is replaced atomically, keeping its permission bits. The text
    is first written to a file with no name (Linux's O_TMPFILE, where the file system has them),
    which is named beside the target only once it is complete, and renamed over it: a process
    killed while writing leaves nothing behind. A character device or a FIFO, or a path through
    /proc/<pid>/fd (/dev/stdout), is written in place, appended, never truncated. A symbolic
    link is refused with an OSError (its target is named in the message): a link planted in a
    shared folder must not make kname replace, or create, a file elsewhere. So is anything else
    (a directory, a block device, a socket), and a FIFO nobody reads, at once rather than waiting.
    `-` names no file (it means a table on stderr, for KNAME_REPORT alone): an OSError too.
    """
    if path == "-":
        raise OSError(errno.EINVAL, "'-' names no file here: name a file, or /dev/stdout")
    if _through_proc(path):
        _write_in_place(path, text)
        return
    mode = _existing_mode(path)
    if mode is not None and stat.S_ISLNK(mode):
        raise OSError(errno.ELOOP, _link_refused(path))
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        _write_in_place(path, text)
        return
    if mode is not None and not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, f"it is {_kind_of(mode)}, not a file kname can write")
    data = text.encode("utf-8")  # an unencodable text fails here, before any file is made
    target = os.path.abspath(path)
    directory, name = os.path.split(target)
    partial = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    descriptor, unnamed = _new_file(directory, partial)
    try:
        if mode is not None:
            os.fchmod(descriptor, stat.S_IMODE(mode))
        _write_all(descriptor, data)
        if unnamed:
            _name(descriptor, directory, partial)
        # A rename replaces the name itself: a link put at `target` since it was looked at is
        # replaced, never followed.
        os.replace(partial, target)
        # Read through the descriptor: what is at `target` now may already be another's.
        _written_here[target] = identity_of(os.fstat(descriptor))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    finally:
        os.close(descriptor)


def _link_refused(path: str) -> str:
    try:
        points_to = os.readlink(path)
    except OSError:
        points_to = "?"  # gone since
    return (
        f"it is a symbolic link (to {points_to!r}); kname writes no file through a link: "
        "name the file itself"
    )


Identity = tuple[int, int, int, int, int]
# The files this process wrote, by absolute path: what each was when written (see written_here).
_written_here: dict[str, Identity] = {}


def identity(path: str) -> Identity | None:
    """What the regular file at `path` is now, to tell whether it changed: device, inode, size,
    modification and change times; None if nothing, or no regular file (a link too), is there."""
    try:
        status = os.lstat(path)
    except (OSError, ValueError):
        return None
    return identity_of(status) if stat.S_ISREG(status.st_mode) else None


def identity_of(status: os.stat_result) -> Identity:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def written_here(path: str) -> Identity | None:
    """The identity of the file this process last wrote at `path` with write_atomically."""
    return _written_here.get(os.path.abspath(path))


def _new_file(directory: str, partial: str) -> tuple[int, bool]:
    """A new file to write into, and whether it is unnamed (O_TMPFILE) or named `partial`."""
    # Mode 0o666 lets the umask decide, as for any file the program writes itself.
    if hasattr(os, "O_TMPFILE"):
        try:
            descriptor = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o666)
        except OSError:  # no unnamed files here (an older kernel, some network file systems)
            pass
        else:
            if os.path.exists(f"/proc/self/fd/{descriptor}"):  # how it gets its name later
                return descriptor, True
            os.close(descriptor)
    return os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), False


def _name(descriptor: int, directory: str, partial: str) -> None:
    """Give the unnamed file open at `descriptor` the name `partial`, as open(2) shows."""
    directory_descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # With a directory descriptor os.link calls linkat(..., AT_SYMLINK_FOLLOW): the file
        # /proc/self/fd/N points to is linked, not that symlink (which fails across devices).
        source = f"/proc/self/fd/{descriptor}"
        os.link(source, os.path.basename(partial), dst_dir_fd=directory_descriptor)
    finally:
        os.close(directory_descriptor)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _existing_mode(path: str) -> int | None:
    """The mode of what is at `path` (a link itself, not what it points to); None if nothing
    is there yet."""
    try:
        return os.lstat(path).st_mode
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
        _write_all(descriptor, text.encode("utf-8"))
    finally:
        os.close(descriptor)


def _kind_of(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"))  # fmt: skip
    return next((kind for test, kind in kinds if test(mode)), "a special file")
