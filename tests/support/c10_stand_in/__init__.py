"""A stand-in for torch's C++ caching allocator, where CI has no torch: its header
(include/c10/cuda/CUDACachingAllocator.h: the names kname's tracker uses) and its libraries
(libc10_cuda from c10_cuda.cpp, which calls the trackers attached to it as torch does, and an
empty libc10), built with the machine's C++ compiler, so that kname's real build of the tracker
(torch_tracker.load), its load and the events it hands over run here.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kname.profiling import torch_tracker
from kname.profiling.torch_tracker import TorchBuild

HERE = Path(__file__).parent
CXX = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
# TraceEntry's actions as torch numbers them.
ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC = 0, 1, 2, 3


def build(folder: Path) -> TorchBuild:
    """The stand-in's libraries built into folder/lib; what kname's tracker compiles against."""
    lib = folder / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (folder / "empty.cpp").write_text("\n")
    common = [CXX, "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{HERE / 'include'}"]
    subprocess.run([*common, str(HERE / "c10_cuda.cpp"), "-o", str(lib / "libc10_cuda.so")],
                   check=True)  # fmt: skip
    subprocess.run([*common, str(folder / "empty.cpp"), "-o", str(lib / "libc10.so")], check=True)
    return TorchBuild((str(HERE / "include"),), str(lib), True, "stand-in")


def allocator(built: TorchBuild, hold_gil: bool = False) -> ctypes.CDLL:
    """The stand-in's libc10_cuda, loaded once per process (its trackers are the process's):
    stand_in_fire(action, address, size) calls them on this thread, without the GIL (or, with
    `hold_gil`, with it held, as a free from Python's refcounting is); stand_in_fire_elsewhere on
    a thread started in C++; stand_in_hold(address, ms) holds the allocator's lock on a thread
    of its own, firing as it takes it and before it lets go (stand_in_join waits for it);
    stand_in_refuse(1) makes it refuse new trackers."""
    loader = ctypes.PyDLL if hold_gil else ctypes.CDLL
    library = loader(str(Path(built.library_dir) / "libc10_cuda.so"), mode=ctypes.RTLD_GLOBAL)
    for name in ("stand_in_fire", "stand_in_fire_elsewhere"):
        getattr(library, name).argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
    library.stand_in_hold.argtypes = [ctypes.c_uint64, ctypes.c_int]
    return library


@dataclass(frozen=True)
class StandIn:
    """The stand-in built, kname's tracker built against it, and its allocator loaded."""

    build: TorchBuild
    tracker: torch_tracker.Tracker
    allocator: ctypes.CDLL
    library: Path  # the tracker's file in the cache


_ready: list[StandIn] = []


def ready(tmp_path_factory) -> StandIn:
    """The process's stand-in (built at the first call, in pytest's temporary folders)."""
    if not _ready:
        built = build(tmp_path_factory.mktemp("c10"))
        cache = tmp_path_factory.mktemp("cache") / "kname"
        tracker = torch_tracker.load(built, cache=cache)
        library = cache / torch_tracker.library_name(torch_tracker.compiler(), built)
        _ready.append(StandIn(built, tracker, allocator(built), library))
    return _ready[0]


def another_copy(stand_in: StandIn, folder: Path) -> torch_tracker.Tracker:
    """A second copy of the tracker, loaded from `folder` under a name of its own (the loader
    hands a library loaded before back for the same name): not attached to torch yet."""
    copy = folder / "copy_of_the_tracker.so"
    copy.write_bytes(stand_in.library.read_bytes())
    return torch_tracker.Tracker(ctypes.CDLL(str(copy)), None)
