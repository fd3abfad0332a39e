"""kname's builds kept between runs: shared libraries compiled on first use (show_ranges.c's
NVTX viewer, the torch allocator tracker) in a cache folder ($XDG_CACHE_HOME/kname, else
~/.cache/kname), trusted only where it is this user's alone: the folder, the library and its
checksum each owned by the effective user, writable by no one else, and not a symlink (checked on
the descriptors opened, beneath the folder's). A library is loaded through /proc/<pid>/fd/N, the
very file whose bytes the checksum (written beside it by kname) was checked against. Each user
says in its own words why a cache is not used (say_untrusted, say_not_kept).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path

NotKept = Callable[[Path, "str | None", object], None]  # (folder, reason, where)
# The longest a compile may take. It runs inside the user's program (the torch tracker's at
# `import torch`): a compiler that hangs is given up on, and that library is done without.
COMPILE_SECONDS = 120.0


def compiler_command(variable: str, names: tuple[str, ...]) -> list[str] | None:
    """The compiler the environment's `variable` names (split as a shell would; ValueError where
    it cannot be), else the first of `names` on PATH; None: neither."""
    words = shlex.split(os.environ.get(variable, ""))
    if words:
        return words
    for name in names:
        path = shutil.which(name)
        if path:
            return [path]
    return None


def compile_library(command: list[str], out: Path) -> str | None:
    """Run the compiler's `command`, which writes `out`: None where it did, else the first line
    of its stderr that tells of an error (else its first line), or that it ran past
    COMPILE_SECONDS (then stopped). OSError: it cannot be run."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=COMPILE_SECONDS
        )
    except subprocess.TimeoutExpired:
        return f"{Path(command[0]).name} ran past {COMPILE_SECONDS:g} s and was stopped"
    if done.returncode == 0 and out.is_file():
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return next((line for line in lines if "error" in line), lines[0] if lines else "no output")


def open_cache(
    folder: Path, say_untrusted: Callable[[Path, str], None], say_not_kept: NotKept
) -> int | None:
    """A descriptor of the cache folder (made owner-only where missing), or None where it
    cannot be had or is not this user's alone (one line says which)."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if folder.is_symlink():  # O_NOFOLLOW's refusal
            say_untrusted(folder, "it is a symlink")
        else:
            say_not_kept(folder, exc.strerror, exc.filename or folder)
        return None
    problem = untrusted(os.fstat(descriptor), stat.S_ISDIR)
    if problem is not None:
        os.close(descriptor)
        say_untrusted(folder, problem)
        return None
    return descriptor


def untrusted(facts: os.stat_result, is_kind: Callable[[int], bool]) -> str | None:
    """Why a file of the cache (its `facts`) is not this user's alone, or None where it is."""
    if not is_kind(facts.st_mode):
        return "it is not a folder" if is_kind is stat.S_ISDIR else "it is not a file"
    if facts.st_uid != os.geteuid():
        return f"it is owned by uid {facts.st_uid}, not by uid {os.geteuid()}"
    if facts.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write it: mode {stat.S_IMODE(facts.st_mode):04o}"
    return None


def cached_or_built(
    folder: Path,
    name: str,
    stack: ExitStack,
    build: Callable[[], Path],
    say_untrusted: Callable[[Path, str], None],
    say_not_kept: NotKept,
) -> tuple[Path, bool]:
    """(the library `name`, whether it was built now): the cache's where the cache is trusted
    and the checksum vouches for it, else build() (a private path), kept in the cache where it
    is trusted and then loaded from there. What is opened stays open until `stack` closes."""
    cached = open_cache(folder, say_untrusted, say_not_kept)
    if cached is not None:
        stack.callback(os.close, cached)
        library = verified(cached, name, stack)
        if library is not None:
            return library, False
    built = build()
    if cached is not None and keep(built.read_bytes(), cached, folder / name, say_not_kept):
        built = verified(cached, name, stack) or built  # loaded from where it was kept
    return built, True


def verified(cached: int, name: str, stack: ExitStack) -> Path | None:
    """The cache's build `name` as /proc/<pid>/fd/N, where its checksum vouches for it (both
    files this user's alone), open until `stack` closes: what NVTX loads is the file whose
    bytes were checked, whatever becomes of the name. None where not (or where there is no
    /proc)."""
    library = open_trusted(cached, name)
    if library is None:
        return None
    stack.callback(os.close, library)
    checksum = read_trusted(cached, name + ".sha256")
    try:
        data = read_all(library)
    except OSError:
        return None
    if checksum is None or checksum.strip() != hashlib.sha256(data).hexdigest().encode():
        return None  # empty, foreign or damaged
    path = Path(f"/proc/{os.getpid()}/fd/{library}")
    return path if path.exists() else None


def open_trusted(folder: int, name: str) -> int | None:
    """A descriptor of `name` in the folder `folder` where it is a file this user's alone,
    else None; a FIFO or a device is never waited on."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(name, flags, dir_fd=folder)
    except OSError:
        return None
    if untrusted(os.fstat(descriptor), stat.S_ISREG) is not None:
        os.close(descriptor)
        return None
    return descriptor


def read_all(descriptor: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(descriptor, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def read_trusted(folder: int, name: str) -> bytes | None:
    """The bytes of `name` in the folder `folder` where it is a file this user's alone."""
    descriptor = open_trusted(folder, name)
    if descriptor is None:
        return None
    try:
        return read_all(descriptor)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def keep(data: bytes, cached: int, library: Path, say_not_kept: NotKept) -> bool:
    """Put a new build in the cache, its checksum beside it; False (and one line) where it
    cannot."""
    try:
        write_whole(cached, library.name, data)
        write_whole(cached, library.name + ".sha256", hashlib.sha256(data).hexdigest().encode())
    except OSError as exc:
        say_not_kept(library.parent, exc.strerror, library)
        return False
    return True


def write_whole(folder: int, name: str, data: bytes) -> None:
    """Write `name` in the folder `folder` under a name of its own, then rename it: a
    concurrent run sees the old file or the new one, never half of one."""
    partial = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(partial, flags, 0o600, dir_fd=folder)
    try:
        with os.fdopen(descriptor, "wb") as file:
            os.fchmod(file.fileno(), 0o644)  # whatever the umask: writable by no one else
            file.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with suppress(OSError):
            os.unlink(partial, dir_fd=folder)
        raise


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kname"
