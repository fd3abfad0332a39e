"""torch's allocator tracker (torch_tracker.py, _torch_tracker/tracker.cpp, and the C that takes
its events, _cupti_c/torch_tracker.c): built by kname's own build step against a stand-in of
torch's C++ allocator (tests/support/c10_stand_in: CI has no torch), kept in its owner-only
cache, loaded, and handed blocks fired from C++ as torch fires them: on this thread with the GIL
released (a ctypes call) or held, and on a thread started in C++ (autograd's). The real torch
is tests/gpu/test_gpu_memory.py's.
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import functools
import os
import re
import stat
import sys
import threading
import time
import types

import pytest
from support import c10_stand_in

from kname import build_cache
from kname.profiling import backward, memory_hooks, torch_tracker
from kname.profiling.capture import NO_PYTHON_FRAME, site_of_frame
from kname.profiling.memory_hooks import TORCH, PoolHooks, TrackedBlocks

MIB = 1 << 20
ALLOC, FREE = c10_stand_in.ALLOC, c10_stand_in.FREE_REQUESTED

pytestmark = [
    pytest.mark.skipif(c10_stand_in.CXX is None, reason="no C++ compiler here"),
    pytest.mark.skipif(
        memory_hooks.tracker_memory() is None,
        reason="kname._native_cupti (TorchMemory.track) is not built here",
    ),
]


@pytest.fixture
def stand_in(tmp_path_factory) -> torch_tracker.TorchBuild:
    return c10_stand_in.ready(tmp_path_factory).build


@pytest.fixture
def tracker(tmp_path_factory) -> torch_tracker.Tracker:
    return c10_stand_in.ready(tmp_path_factory).tracker


@pytest.fixture
def allocator(tmp_path_factory) -> ctypes.CDLL:
    return c10_stand_in.ready(tmp_path_factory).allocator


def tracked(tracker: torch_tracker.Tracker, site_of=None) -> tuple[PoolHooks, TrackedBlocks]:
    """kname's tracked hook on the stand-in allocator, charging a new ledger."""
    hooks = PoolHooks(site_of=site_of)
    hooks.active = True
    blocks = TrackedBlocks(hooks, memory_hooks.tracker_memory(), tracker)
    hooks.settlers.append(blocks.settle)
    blocks.attach()
    return hooks, blocks


def charged(hooks: PoolHooks) -> dict[str, dict[str, int]]:
    """{site name: its numbers} of the torch ledger, settled."""
    hooks.settle()
    return hooks.ledgers[TORCH].site_dicts()


def this_line(offset: int = 0) -> int:
    return sys._getframe(1).f_lineno + offset


COMPILING = "kname: profile --memory: compiling torch's allocator tracker for this torch"


def test_the_tracker_is_compiled_once_then_loaded_from_its_owner_only_cache(
    stand_in, tmp_path, capsys
):
    cache = tmp_path / "kname"
    first = torch_tracker.load(stand_in, cache=cache)
    again = torch_tracker.load(stand_in, cache=cache)
    assert first.compile_seconds is not None and again.compile_seconds is None
    (said,) = capsys.readouterr().err.splitlines()  # the pause of the compile, said once
    assert said.startswith(COMPILING)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    (library,) = cache.glob("libkname_torch_tracker-*.so")
    assert library.with_name(library.name + ".sha256").is_file()


def test_a_cache_others_may_write_is_not_used_and_said_in_one_line(stand_in, tmp_path, capsys):
    cache = tmp_path / "kname"
    cache.mkdir()
    os.chmod(cache, 0o777)
    for _ in range(2):  # built for each run: nothing is loaded from a folder others can write
        assert torch_tracker.load(stand_in, cache=cache).compile_seconds is not None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4, err  # each run: the folder refused, then the compile's pause
    assert all("others may write it" in line for line in err[0::2]), err
    assert all(line.startswith(COMPILING) for line in err[1::2]), err
    assert not list(cache.glob("*.so"))


def test_a_build_that_cannot_be_made_is_one_line_saying_why(stand_in, tmp_path, monkeypatch):
    headless = torch_tracker.TorchBuild((str(tmp_path),), stand_in.library_dir, True, "none")
    with pytest.raises(torch_tracker.TrackerUnavailable, match=r"compiling it failed.*c10/cuda"):
        torch_tracker.load(headless, cache=tmp_path / "kname")
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(torch_tracker.TrackerUnavailable, match="cannot run"):
        torch_tracker.load(stand_in, cache=tmp_path / "kname")


def test_a_compiler_that_hangs_is_stopped_and_the_tracker_done_without(
    stand_in, tmp_path, monkeypatch
):
    """The compile runs inside the user's program, at `import torch`: it may not hang it."""
    hanging = tmp_path / "hanging-c++"
    hanging.write_text("#!/bin/sh\nsleep 60\n")
    hanging.chmod(0o755)
    monkeypatch.setenv("CXX", str(hanging))
    monkeypatch.setattr(build_cache, "COMPILE_SECONDS", 0.5)
    started = time.monotonic()
    said = re.escape("hanging-c++ ran past 0.5 s and was stopped")
    with pytest.raises(torch_tracker.TrackerUnavailable, match=said):
        torch_tracker.load(stand_in, cache=tmp_path / "kname")
    assert time.monotonic() - started < 30


def test_blocks_fired_without_the_gil_are_charged_to_the_line_that_allocated(
    named, tracker, allocator
):
    hooks, blocks = tracked(tracker)
    line = this_line(+2)
    for address in (0x100, 0x200, 0x100):
        allocator.stand_in_fire(ALLOC, address, 2 * MIB)  # the GIL released: a ctypes call
        allocator.stand_in_fire(FREE, address, 2 * MIB)
    allocator.stand_in_fire(ALLOC, 0x300, MIB)
    allocator.stand_in_fire(c10_stand_in.SEGMENT_ALLOC, 0x300, 20 * MIB)  # not a block: left out
    sites = charged(hooks)
    blocks.stop()
    by_line = {name.rsplit(":", 1)[1]: numbers for name, numbers in sites.items()}
    assert by_line[str(line)]["allocated"] == by_line[str(line)]["freed"] == 6 * MIB
    assert by_line[str(line + 2)]["allocated"] == MIB and by_line[str(line + 2)]["freed"] == 0
    assert hooks.ledgers[TORCH].unmatched_frees == 0 and len(sites) == 2


def test_take_tracked_hands_the_same_events_over_as_tuples(named, tracker, allocator):
    """The tuple path (tests/gpu/memory_floor.py's rows) beside take_tracked_into's."""
    _hooks, blocks = tracked(tracker)
    line = this_line(+1)
    allocator.stand_in_fire(ALLOC, 0x600, MIB)
    allocator.stand_in_fire(FREE, 0x600, MIB)
    (alloc, free) = blocks._native.take_tracked()
    blocks.stop()
    assert alloc[0] == 0x600 and alloc[1].endswith(f":{line}") and alloc[3] == MIB
    assert free[0] == 0x600 and free[1] is None and free[2] >= alloc[2]
    assert blocks._native.take_tracked() == []  # taken: the buffer emptied


def test_blocks_fired_with_the_gil_held_are_charged_the_same_way(named, tracker, stand_in):
    holding = c10_stand_in.allocator(stand_in, hold_gil=True)  # as a free from refcounting
    hooks, blocks = tracked(tracker)
    line = this_line(+1)
    holding.stand_in_fire(ALLOC, 0x400, MIB)
    holding.stand_in_fire(FREE, 0x400, MIB)
    (name,) = charged(hooks)
    blocks.stop()
    assert name.endswith(f"test_torch_tracker.py:{line}")


def test_a_block_from_a_thread_started_in_cpp_takes_the_backward_pass_running(
    named, tracker, allocator
):
    hooks, blocks = tracked(tracker)
    backward.collect(lambda frame: "train.py:9 loss.backward()")
    try:
        scope = backward.enter(sys._getframe())
        allocator.stand_in_fire_elsewhere(ALLOC, 0x500, MIB)  # no Python frame there
        backward.leave(scope)
    finally:
        backward.collect(None)
    allocator.stand_in_fire_elsewhere(ALLOC, 0x600, MIB)  # no pass running
    sites = charged(hooks)
    blocks.stop()
    assert sites["train.py:9 loss.backward()"]["allocated"] == MIB
    assert sites[NO_PYTHON_FRAME]["allocated"] == MIB


def test_a_line_is_found_by_knames_rules_once_then_known_without_the_gil(named, tracker, allocator):
    asked = []

    def counted(frame):
        asked.append(frame)
        return site_of_frame(frame)

    hooks, blocks = tracked(tracker, site_of=counted)
    line = this_line(+2)
    for address in (0x700, 0x800, 0x900):  # threading's run (library code) allocates
        threading.Thread(target=allocator.stand_in_fire, args=(ALLOC, address, MIB)).run()
    sites = charged(hooks)
    blocks.stop()
    (name,) = sites
    assert name.endswith(f"test_torch_tracker.py:{line}") and sites[name]["allocations"] == 3
    assert len(asked) == 1  # the first block's line, by kname's rules; the others known in C


def test_a_stopped_tracker_hands_nothing_over(named, tracker, allocator):
    hooks, blocks = tracked(tracker)
    allocator.stand_in_fire(ALLOC, 0xA00, MIB)
    hooks.active = False  # a profile paused
    allocator.stand_in_fire(ALLOC, 0xB00, MIB)
    hooks.active = True
    hooks.settle()
    blocks.stop()
    allocator.stand_in_fire(ALLOC, 0xC00, MIB)
    hooks.settle()
    assert sum(s.allocations for s in hooks.ledgers[TORCH].sites.values()) == 1


def test_a_block_fired_inside_torchs_lock_while_another_thread_holds_the_gil_never_waits_for_it(
    named, tracker, allocator, stand_in
):
    """torch calls its trackers inside its allocator's lock; a thread holding the GIL may be
    waiting for that lock (a tensor freed by Python's refcounting): were the tracker to take
    the GIL there, neither would go on. Here this thread holds the GIL while it waits for the
    lock a thread started in C++ holds, and that thread fires a block before it lets go."""
    holding = c10_stand_in.allocator(stand_in, hold_gil=True)
    hooks, blocks = tracked(tracker)
    faulthandler.dump_traceback_later(60, exit=True)  # a deadlock ends the run, said
    try:
        allocator.stand_in_hold(0xD00, 200)
        time.sleep(0.05)  # the lock taken there
        holding.stand_in_fire(ALLOC, 0xF00, MIB)  # waits for the lock, the GIL held
        allocator.stand_in_join()
    finally:
        faulthandler.cancel_dump_traceback_later()
    sites = charged(hooks)
    blocks.stop()
    assert sites[NO_PYTHON_FRAME]["allocations"] == 2 and len(sites) == 2


def fire_from_line_a(fire) -> None:
    threading.Thread(target=fire).run()  # threading's run (library code) allocates


def fire_from_line_b(fire) -> None:
    threading.Thread(target=fire).run()  # the same instruction of run, from another line


def test_lines_reached_through_one_library_instruction_are_each_known_without_the_gil(
    named, tracker, allocator
):
    """Each nn.Linear's blocks are handed out at one instruction of torch's Linear.forward,
    reached from a user line per layer: the known sites keep each line's walk apart."""
    hooks, blocks = tracked(tracker)
    fire = functools.partial(allocator.stand_in_fire, ALLOC)
    for round_number in range(6):
        fire_from_line_a(functools.partial(fire, 0x1000 + round_number, MIB))
        fire_from_line_b(functools.partial(fire, 0x2000 + round_number, MIB))
        if round_number == 1:
            hooks.settle()
            blocks._native.take_misses()  # each line's first block: not known yet
    sites = charged(hooks)
    misses = blocks._native.take_misses()
    blocks.stop()
    assert sorted(numbers["allocations"] for numbers in sites.values()) == [6, 6]
    assert {name.split()[0] for name in sites} == {"fire_from_line_a", "fire_from_line_b"}
    assert misses == 0  # rounds 2 to 5: every block's line known in C


def a_torch_tree(
    folder, with_headers: bool = True, cmake: str | None = None
) -> types.SimpleNamespace:
    """The parts of an installed torch that torch_build reads: its folder (include/, lib/, its
    CMake package's TorchConfig.cmake where `cmake` is given), its version and its C++ ABI flag
    (torch itself is what CI lacks)."""
    header = folder / "torch" / "include" / "c10" / "cuda" / "CUDACachingAllocator.h"
    if with_headers:
        header.parent.mkdir(parents=True)
        header.write_text("\n")
    if cmake is not None:
        config = folder / "torch" / torch_tracker.TORCH_CMAKE
        config.parent.mkdir(parents=True)
        config.write_text(cmake)
    return types.SimpleNamespace(
        __file__=str(folder / "torch" / "__init__.py"), __version__="2.11.0+cu130",
        version=types.SimpleNamespace(cuda="13.0", git_version="abc"),
        _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True),
    )  # fmt: skip


def test_a_torch_build_reads_its_headers_the_cuda_runtimes_its_libraries_and_its_abi(
    tmp_path, monkeypatch
):
    cuda = tmp_path / "cuda"
    (cuda / "include").mkdir(parents=True)
    (cuda / "include" / "cuda_runtime_api.h").write_text("\n")
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    build = torch_tracker.torch_build(a_torch_tree(tmp_path))
    assert build.include_dirs[0] == str(tmp_path / "torch" / "include")
    assert str(cuda / "include") in build.include_dirs
    assert build.library_dir == str(tmp_path / "torch" / "lib") and build.cxx11_abi
    assert build.version.startswith("2.11.0+cu130 cuda 13.0")
    assert build.cxx_standard == "17"  # no CMake package: torch 2.11's standard


# TorchConfig.cmake's lines as torch 2.14 writes them (2.11's say 17).
TORCH_CONFIG = """set_target_properties(torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${{TORCH_INCLUDE_DIRS}}"
    CXX_STANDARD {standard}
)
"""


@pytest.mark.parametrize("standard", ["17", "20", "23"])
def test_the_tracker_is_compiled_in_the_cxx_standard_torchs_cmake_package_sets(
    tmp_path, monkeypatch, standard
):
    cuda = tmp_path / "cuda" / "include"
    cuda.mkdir(parents=True)
    (cuda / "cuda_runtime_api.h").write_text("\n")
    monkeypatch.setenv("CUDA_HOME", str(cuda.parent))
    tree = a_torch_tree(tmp_path, cmake=TORCH_CONFIG.format(standard=standard))
    build = torch_tracker.torch_build(tree)
    command = torch_tracker.compile_command(["c++"], build, tmp_path / "out.so")
    assert [word for word in command if word.startswith("-std=")] == [f"-std=c++{standard}"]
    # Another standard is another build: not the cached file of the one before.
    other = dataclasses.replace(build, cxx_standard="14")
    assert torch_tracker.library_name(["c++"], build) != torch_tracker.library_name(["c++"], other)


def test_a_cmake_package_that_names_no_standard_leaves_cxx17(tmp_path):
    for text in ("", "CXX_STANDARD\n", "set(CMAKE_CXX_STANDARD_REQUIRED ON)\n"):
        config = tmp_path / "TorchConfig.cmake"
        config.write_text(text)
        assert torch_tracker.cxx_standard(config) == "17"
    assert torch_tracker.cxx_standard(tmp_path / "absent.cmake") == "17"


def test_a_torch_without_headers_or_cuda_headers_is_one_line_saying_so(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvcc
    # Neither the CUDA wheels nor a system toolkit, whatever this machine has installed.
    monkeypatch.setattr(torch_tracker, "PIP_CUDA", "kname_no_such_cuda_wheels")
    monkeypatch.setattr(torch_tracker, "SYSTEM_CUDA", str(tmp_path / "no-system-cuda"))
    with pytest.raises(torch_tracker.TrackerUnavailable, match="ships no C\\+\\+ headers"):
        torch_tracker.torch_build(a_torch_tree(tmp_path / "a", with_headers=False))
    with pytest.raises(torch_tracker.TrackerUnavailable, match="no CUDA runtime headers"):
        torch_tracker.torch_build(a_torch_tree(tmp_path / "b"))
