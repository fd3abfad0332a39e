"""torch's allocator tracker for `kname profile --memory`: a small C++ file, compiled on first use
against the torch in use and kept, that hands each block torch's caching allocator hands out or
is asked to free to kname's C (TorchMemory.track's function), with no Python per event.

torch's caching allocator calls the C++ trackers attached to it
(c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker) at every entry of its trace, with
its history on or off, inside its per-device lock, on the allocating thread: no GIL may be taken
there, and trackers cannot be taken out (kname_tracker_off makes this one return at once).
_torch_tracker/tracker.cpp is compiled with the C++ compiler ($CXX, else c++, g++ or clang++)
against torch's headers (torch/include, and the CUDA headers they include: a pip install's
nvidia-* packages, and a toolkit's: $CUDA_HOME, /usr/local/cuda or nvcc's), its libraries
(torch/lib: c10, c10_cuda), its C++ ABI (torch._C._GLIBCXX_USE_CXX11_ABI) and the C++ standard
its headers are written in (the CXX_STANDARD its CMake package sets for C++ users: 17 in torch
2.11, 20 in 2.14, whose headers C++17 cannot read); the build is kept in kname's cache
(build_cache: owner-only, checked) under a name that digests the source, the command and
torch's version and build, so another torch builds its own.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kname import build_cache

SOURCE = Path(__file__).parent / "_torch_tracker" / "tracker.cpp"
FLAGS = ("-O2", "-shared", "-fPIC", "-w")
CXX_STANDARD = "17"  # where torch declares none (its CMake package absent)
TORCH_CMAKE = Path("share") / "cmake" / "Torch" / "TorchConfig.cmake"
LIBRARIES = ("-lc10_cuda", "-lc10")
CUDA_HEADER = "cuda_runtime_api.h"
PIP_CUDA = "nvidia"  # the namespace package of the CUDA wheels (nvidia/<part>/include)
SYSTEM_CUDA = "/usr/local/cuda"


class TrackerUnavailable(RuntimeError):
    """The tracker cannot be built or attached here; the message says why, in one line."""


@dataclass(frozen=True)
class TorchBuild:
    """What the tracker is compiled against: torch's (or a stand-in's) headers and libraries."""

    include_dirs: tuple[str, ...]
    library_dir: str
    cxx11_abi: bool
    version: str  # torch's version and build: part of the cached file's name
    cxx_standard: str = CXX_STANDARD  # "17", "20": the -std=c++ its headers need


def torch_build(torch: Any) -> TorchBuild:
    """The build of the imported `torch`: its headers, the CUDA runtime's, its libraries and
    its C++ ABI."""
    root = Path(torch.__file__).parent
    include = root / "include"
    if not (include / "c10" / "cuda" / "CUDACachingAllocator.h").is_file():
        raise TrackerUnavailable(f"torch ships no C++ headers here ({include})")
    cuda = cuda_include_dirs()
    if not any((folder / CUDA_HEADER).is_file() for folder in cuda):
        raise TrackerUnavailable(
            f"no CUDA runtime headers ({CUDA_HEADER}) found: install nvidia-cuda-runtime for "
            "this CUDA, or set CUDA_HOME"
        )
    version = getattr(torch, "version", None)
    cuda_version, commit = getattr(version, "cuda", None), getattr(version, "git_version", "")
    build = f"{torch.__version__} cuda {cuda_version} {commit}"
    return TorchBuild(
        include_dirs=(str(include), *map(str, cuda)),
        library_dir=str(root / "lib"),
        cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        version=build,
        cxx_standard=cxx_standard(root / TORCH_CMAKE),
    )


def cxx_standard(cmake: Path) -> str:
    """The C++ standard torch's CMake package sets on its targets (CXX_STANDARD 17 or 20), the
    one its headers are written in; CXX_STANDARD where it says none."""
    try:
        text = cmake.read_text(errors="replace")
    except OSError:
        return CXX_STANDARD
    found = re.search(r"\bCXX_STANDARD\s+(\d\d)\b", text)
    return found.group(1) if found else CXX_STANDARD


def cuda_include_dirs() -> list[Path]:
    """The folders of CUDA headers torch's may include: a pip install's (nvidia/*/include, the
    runtime's and the others'), then $CUDA_HOME's, $CUDA_PATH's, /usr/local/cuda's or nvcc's."""
    found = importlib.util.find_spec(PIP_CUDA)
    roots = list(found.submodule_search_locations or ()) if found is not None else []
    folders = [folder for root in roots for folder in sorted(Path(root).glob("*/include"))]
    nvcc = shutil.which("nvcc")
    toolkit = str(Path(nvcc).resolve().parent.parent) if nvcc else None
    homes = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), SYSTEM_CUDA, toolkit)
    for home in homes:
        if home and (Path(home) / "include" / CUDA_HEADER).is_file():
            folders.append(Path(home) / "include")
            break
    return folders


def compiler() -> list[str]:
    """The C++ compiler: $CXX, else the first of c++, g++ and clang++ on PATH."""
    try:
        command = build_cache.compiler_command("CXX", ("c++", "g++", "clang++"))
    except ValueError as exc:
        cxx = os.environ.get("CXX", "")
        raise TrackerUnavailable(f"CXX={cxx!r} is not a command line ({exc})") from None
    if command is not None:
        return command
    raise TrackerUnavailable("no C++ compiler (c++, g++ or clang++ on PATH, or CXX)")


def compile_command(cxx: list[str], build: TorchBuild, out: Path) -> list[str]:
    """The command that compiles the tracker against `build` into `out`."""
    standard = f"-std=c++{build.cxx_standard}"
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(build.cxx11_abi)}"
    includes = [f"-I{folder}" for folder in build.include_dirs]
    rpath = f"-Wl,-rpath,{build.library_dir}"
    return [*cxx, standard, *FLAGS, abi, *includes, str(SOURCE), f"-L{build.library_dir}",
            *LIBRARIES, rpath, "-o", str(out)]  # fmt: skip


def library_name(cxx: list[str], build: TorchBuild) -> str:
    """The cached build's file name: a digest of the source, the command and torch's build."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    words = compile_command(cxx, build, Path("out"))
    digest.update("\0".join([*words, build.version]).encode())
    return f"libkname_torch_tracker-{digest.hexdigest()[:16]}.so"


@dataclass
class Tracker:
    """The loaded tracker; `compile_seconds`: how long it took to build (None: from the cache)."""

    library: ctypes.CDLL
    compile_seconds: float | None

    def attach(self, sink: int) -> None:
        """torch's allocator calls the C function at `sink` from now on (its tracker attached
        once per process; off at exit: torch's blocks freed as Python finishes are not told);
        raises TrackerUnavailable where torch refuses."""
        atexit.unregister(self.off)
        atexit.register(self.off)
        attach = self.library.kname_tracker_attach
        attach.argtypes, attach.restype = [ctypes.c_void_p], ctypes.c_int
        if attach(sink) != 0:
            failure = self.library.kname_tracker_failure
            failure.restype = ctypes.c_char_p
            said = (failure() or b"").decode(errors="replace").splitlines()
            raise TrackerUnavailable(f"torch refused the tracker: {said[0] if said else '?'}")

    def off(self) -> None:
        """No block handed over from now on (torch keeps the tracker: it returns at once)."""
        self.library.kname_tracker_off()


def load(build: TorchBuild, cache: Path | None = None) -> Tracker:
    """The tracker for `build`: the cache's where it vouches for one, else compiled now (and
    kept where the cache is trusted). Raises TrackerUnavailable, one line saying why."""
    cxx = compiler()
    name = library_name(cxx, build)
    folder = cache or build_cache.cache_folder()
    with ExitStack() as stack:

        def compiled() -> Path:
            # A pause of seconds in the user's program, once per torch build: said, not silent.
            sys.stderr.write(
                "kname: profile --memory: compiling torch's allocator tracker for this torch "
                "(once; a few seconds)\n"
            )
            return _compile(cxx, build, name, stack)

        started = time.perf_counter()
        library, built_now = build_cache.cached_or_built(
            folder, name, stack, compiled, _say_untrusted, _say_not_kept
        )
        seconds = time.perf_counter() - started if built_now else None
        return Tracker(_open(library), seconds)


def _open(path: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise TrackerUnavailable(f"the tracker built does not load ({exc})") from None


def _compile(cxx: list[str], build: TorchBuild, name: str, stack: ExitStack) -> Path:
    """The tracker compiled into a private folder (owner-only), removed when `stack` closes."""
    try:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kname-tracker-")))
    except OSError as exc:
        raise TrackerUnavailable(f"no folder to build it in ({exc.strerror})") from None
    out = folder / name
    command = compile_command(cxx, build, out)
    try:
        failed = build_cache.compile_library(command, out)
    except OSError as exc:
        raise TrackerUnavailable(f"cannot run {cxx[0]!r} ({exc.strerror})") from None
    if failed is not None:
        raise TrackerUnavailable(f"compiling it failed: {failed[:300]}")
    return out


def _say_untrusted(folder: Path, problem: str) -> None:
    sys.stderr.write(
        f"kname: the torch allocator tracker is not kept in {folder} ({problem}): it is "
        "compiled at each run; make the folder yours alone (chmod go-w), or set XDG_CACHE_HOME\n"
    )


def _say_not_kept(folder: Path, reason: str | None, where: object) -> None:
    sys.stderr.write(
        f"kname: cannot keep the torch allocator tracker in {folder} ({reason}: {where}): it "
        "is compiled at each run; set XDG_CACHE_HOME to a writable folder\n"
    )
