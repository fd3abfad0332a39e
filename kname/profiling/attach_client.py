"""`kname attach PID`: ask a process started with KNAME=1 for a profile window, wait, print.

The request goes in the user's private runtime folder (requests.py), then SIGUSR2 tells the
process to read it: the OS lets only the process's owner (or root) send it a signal. The
process answers in its reply file once the window has ended (ondemand.py); this command prints
the table on stdout and each note, and each refusal, as one line on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import IO, Any

from kname.config import KNAME, parse_switch
from kname.profiling.ondemand import SIGNAL
from kname.profiling.requests import (
    REPLY,
    REQUEST,
    Request,
    RequestRefused,
    exchange_path,
    read_owned,
    runtime_folder,
)

ANSWER_SECONDS = 10.0  # how long the process has to take the request (its main thread runs)
WRITE_SECONDS = 120.0  # after the window: how long writing its files may take
POLL = 0.05


class AttachError(Exception):
    """`kname attach` cannot go on: the message is one line."""


def attach(pid: int, request: Request, out: IO[str] = sys.stdout) -> int:
    """Run `request`'s window in process `pid` and print its table; 0 once written, 1 where
    the process refused or could not be asked (one line on stderr)."""
    try:
        reply = _ask(pid, request)
    except AttachError as exc:
        _say(str(exc))
        return 1
    if "refused" in reply:
        _say(f"process {pid}: {reply['refused']}")
        return 1
    out.write(reply.get("table", ""))
    out.flush()
    for note in reply.get("notes", []):
        _say(f"process {pid}: {note}")
    for path in reply.get("files", []):
        _say(f"wrote {path}")
    return 0


def _say(line: str) -> None:
    print(f"kname attach: {line}", file=sys.stderr)


def _ask(pid: int, request: Request) -> dict[str, Any]:
    """Send the request, wait for the reply (the window, then the files written)."""
    environ = answers(pid)
    try:
        # The process's own runtime folder: where it will look (its XDG_RUNTIME_DIR, not ours).
        folder = runtime_folder(make=True, environ=environ)
    except RequestRefused as exc:
        raise AttachError(str(exc)) from None
    request_path = exchange_path(folder, pid, REQUEST)
    reply_path = exchange_path(folder, pid, REPLY)
    for stale in (request_path, reply_path):
        _remove(stale)
    _write_private(request_path, request.text())
    os.kill(pid, SIGNAL)
    taken_by = time.monotonic() + ANSWER_SECONDS
    while os.path.exists(request_path):
        if time.monotonic() > taken_by or not _alive(pid):
            _remove(request_path)
            raise AttachError(
                f"process {pid} did not take the request within {ANSWER_SECONDS:g} s (its main "
                "thread runs no Python: a long call in C, or it is stopped); nothing was asked"
            )
        time.sleep(POLL)
    deadline = time.monotonic() + request.duration + WRITE_SECONDS
    while not os.path.exists(reply_path):
        if not _alive(pid) and not os.path.exists(reply_path):
            raise AttachError(f"process {pid} ended before it could answer")
        if time.monotonic() > deadline:
            raise AttachError(
                f"process {pid} gave no answer within the window and {WRITE_SECONDS:g} s"
            )
        time.sleep(POLL)
    try:
        reply = json.loads(read_owned(reply_path, f"the reply {reply_path}"))
    except (RequestRefused, ValueError) as exc:
        raise AttachError(str(exc)) from None
    finally:
        _remove(reply_path)
    if not isinstance(reply, dict):
        raise AttachError(f"the reply {reply_path} is not an object")
    return reply


def answers(pid: int) -> dict[str, str] | None:
    """The environment of `pid` (None where /proc does not show it); AttachError unless it is a
    process of this user that kname in it would answer: started with KNAME=1 (or -X kname), a
    SIGUSR2 handler set (the OS's mask of signals caught)."""
    if pid <= 0 or pid == os.getpid():
        raise AttachError(f"{pid} is not another process's id")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise AttachError(f"no process {pid}") from None
    except PermissionError:
        raise AttachError(
            f"process {pid} is another user's: only its owner can profile it"
        ) from None
    environ, argv = _environ_and_argv(pid)
    if environ is not None and not _switched_on(environ, argv):
        raise AttachError(
            f"process {pid} was not started with KNAME=1 (or kname run, -X kname): no kname in "
            "it can answer; start it so"
        )
    if _catches(pid, int(SIGNAL)) is False:
        raise AttachError(
            f"process {pid} does not answer kname attach: kname did not set its SIGUSR2 handler "
            "there (the program handles SIGUSR2 itself, kname started off its main thread, or "
            "it is a job's launcher or a rank KNAME_RANKS leaves out)"
        )
    return environ


def _environ_and_argv(pid: int) -> tuple[dict[str, str] | None, list[bytes]]:
    """`pid`'s environment and command line, from /proc (None, [] where unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            entries = file.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            argv = file.read().split(b"\0")
    except OSError:
        return None, []
    environ = {}
    for entry in entries:
        name, equals, value = entry.decode("utf-8", "surrogateescape").partition("=")
        if equals:
            environ[name] = value
    return environ, argv


def _switched_on(environ: dict[str, str], argv: list[bytes]) -> bool:
    """Whether a process of this environment and command line started kname (KNAME, -X kname)."""
    for index, word in enumerate(argv[:-1]):
        if word == b"-X" and argv[index + 1].split(b"=")[0] == b"kname":
            return True
    return parse_switch(environ.get(KNAME)) is True


def _catches(pid: int, signum: int) -> bool | None:
    """Whether `pid` has a handler for `signum` (/proc's SigCgt); None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (ended, not yet waited for) is gone for this purpose.
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _write_private(path: str, text: str) -> None:
    """`text` at `path` in the private runtime folder, mode 0600, put in place whole."""
    partial = f"{path}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(partial, flags, 0o600)
    try:
        os.write(descriptor, text.encode("utf-8"))
    finally:
        os.close(descriptor)
    os.replace(partial, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
