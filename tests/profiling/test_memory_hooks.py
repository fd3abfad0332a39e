"""The pools' hooks (memory_hooks.py): each block charged to the line that asked for it.

CuPy and torch cannot allocate without a GPU: their hook interfaces are stood in for here by
the smallest objects with the same names (cupy.cuda.MemoryHook, entered per thread; torch's
GPU-trace registry and torch.cuda.memory_allocated), which call kname's hook the way the
libraries do (tests/gpu/test_gpu_memory.py runs the real ones).
"""

from __future__ import annotations

import copy
import ctypes
import functools
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kname import callsite, walk
from kname.config import DEFAULT_FORMAT
from kname.profiling.capture import NO_PYTHON_FRAME
from kname.profiling.memory_hooks import (
    CUPY,
    TORCH,
    PoolHooks,
    cupy_hook,
    sizes_of,
    torch_hook,
)

MIB = 1 << 20


class StandInMemoryHook:
    """cupy.cuda.MemoryHook's interface: `with hook:` puts it in this thread's list."""

    active: ClassVar[dict[int, list]] = {}

    def __enter__(self):
        StandInMemoryHook.active.setdefault(threading.get_ident(), []).append(self)
        return self

    def __exit__(self, *exc):
        StandInMemoryHook.active[threading.get_ident()].remove(self)


def cupy_stand_in() -> types.SimpleNamespace:
    return types.SimpleNamespace(cuda=types.SimpleNamespace(MemoryHook=StandInMemoryHook))


@pytest.fixture
def named():
    callsite.configure((), DEFAULT_FORMAT, 1, False)
    yield
    callsite.configure((), DEFAULT_FORMAT, 1, True)
    callsite.clear()


def this_line(offset: int = 0) -> int:
    return sys._getframe(1).f_lineno + offset


def test_a_cupy_block_is_charged_to_the_line_that_asked_and_its_free_to_that_line_too(named):
    hooks = PoolHooks()
    hooks.active = True
    hook = cupy_hook(cupy_stand_in(), hooks)
    line = this_line(+1)
    hook.malloc_postprocess(device_id=0, size=MIB, mem_size=MIB, mem_ptr=0x10, pmem_id=0x1)
    hook.free_postprocess(device_id=0, mem_size=MIB, mem_ptr=0x10, pmem_id=0x1)
    (site,) = hooks.ledgers[CUPY].sites
    assert site.endswith(f"test_memory_hooks.py:{line}")
    assert hooks.ledgers[CUPY].site_dicts()[site]["freed"] == MIB


def test_stopped_hooks_charge_nothing_and_cupys_is_taken_out_on_its_own_thread(named):
    hooks = PoolHooks()
    hooks.active = True
    hooks._hook_cupy(cupy_stand_in())
    (hook,) = StandInMemoryHook.active[threading.get_ident()]
    elsewhere = threading.Thread(target=hooks.stop)  # a --duration timer's thread
    elsewhere.start()
    elsewhere.join()
    assert StandInMemoryHook.active[threading.get_ident()] == [hook]  # left in, inert
    hook.malloc_postprocess(device_id=0, size=8, mem_size=512, mem_ptr=0x20, pmem_id=0x1)
    assert CUPY not in hooks.ledgers
    hooks._hook_cupy(cupy_stand_in())
    hooks.stop()
    assert len(StandInMemoryHook.active[threading.get_ident()]) == 1


def test_a_fault_in_a_hook_is_one_line_and_the_allocation_goes_on(named, capsys, monkeypatch):
    from kname import _warnings

    monkeypatch.setattr(_warnings, "_said", set())

    def broken(frame):
        raise RuntimeError("no site")

    hooks = PoolHooks(site_of=broken)
    hooks.active = True
    hook = cupy_hook(cupy_stand_in(), hooks)
    for _ in range(2):
        hook.malloc_postprocess(device_id=0, size=8, mem_size=512, mem_ptr=0x20, pmem_id=0x1)
    err = capsys.readouterr().err
    assert err.count("charging a CuPy allocation") == 1 and "no site" in err


class StandInTorch:
    """torch's pieces TorchBlocks uses: the GPU trace registry (torch.cuda._gpu_trace), the
    allocation history (_record_memory_history, _snapshot) and is_initialized. alloc() and
    free() do what torch's allocator does (the history first, then the trace's callbacks), in
    one frame standing for torch's registry, as the user's line sees it."""

    def __init__(self, monkeypatch, clear_history: bool = True) -> None:
        self.allocation: list = []
        self.deallocation: list = []
        self.history: list[dict] = []
        self.recording = False
        self.held: dict[int, int] = {}
        trace = types.ModuleType("torch.cuda._gpu_trace")
        trace.register_callback_for_memory_allocation = self.allocation.append
        trace.register_callback_for_memory_deallocation = self.deallocation.append
        memory = types.SimpleNamespace(
            _record_memory_history=self.record if clear_history else self.record_without_clear,
            _snapshot=self.snapshot,
        )
        cuda = types.ModuleType("torch.cuda")
        cuda._gpu_trace, cuda.memory = trace, memory
        cuda.is_initialized = lambda: False
        self.module = types.ModuleType("torch")
        self.module.cuda = cuda
        self.module._C = types.SimpleNamespace(_activate_gpu_trace=lambda: None)
        for name, module in (("torch", self.module), ("torch.cuda", cuda),
                             ("torch.cuda._gpu_trace", trace)):  # fmt: skip
            monkeypatch.setitem(sys.modules, name, module)

    def record(self, enabled, context, stacks, max_entries, clear_history=False):
        self.recording = enabled == "all"
        if clear_history:
            self.history.clear()

    def record_without_clear(self, enabled, context, stacks, max_entries):
        self.recording = enabled == "all"

    def snapshot(self) -> dict:
        blocks = [
            {"address": a, "size": n, "state": "active_allocated"} for a, n in self.held.items()
        ]
        return {"device_traces": [list(self.history)], "segments": [{"blocks": blocks}]}

    def alloc(self, address: int, size: int, _from_c: object = None) -> None:
        self.held[address] = size
        if self.recording:
            entry = {"action": "alloc", "addr": address, "size": size}
            self.history.append(entry | {"time_us": time.time_ns() // 1000})
        for callback in self.allocation:
            callback(address)

    def free(self, address: int) -> None:
        for callback in self.deallocation:
            callback(address)
        del self.held[address]


def torch_hooks(torch: StandInTorch) -> PoolHooks:
    hooks = PoolHooks()
    hooks.active = True
    torch_hook(torch.module, hooks)
    return hooks


def test_a_torch_block_is_sized_from_torchs_history_and_charged_to_the_calling_line(
    named, monkeypatch
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch)
    line = this_line(+1)
    torch.alloc(0x100, 16 * MIB)
    torch.free(0x100)
    torch.alloc(0x100, 2 * MIB)  # the same block again, smaller: its own size
    hooks.settle()
    sites = {
        name.rsplit(":", 1)[1]: numbers
        for name, numbers in hooks.ledgers[TORCH].site_dicts().items()
    }
    assert sites[str(line)]["allocated"] == sites[str(line)]["freed"] == 16 * MIB
    assert sites[str(line + 2)]["allocated"] == 2 * MIB and sites[str(line + 2)]["freed"] == 0
    assert torch.history == []  # read, then cleared


def test_a_torch_block_the_history_missed_is_sized_from_the_blocks_held(named, monkeypatch):
    torch = StandInTorch(monkeypatch, clear_history=False)
    hooks = torch_hooks(torch)
    torch.record = lambda **settings: None  # a history that records nothing
    torch.module.cuda.memory._record_memory_history = torch.record
    torch.alloc(0x200, 4 * MIB)
    torch.alloc(0x300, 1 * MIB)
    del torch.held[0x300]  # freed since, unseen: not followed
    hooks.stop()  # settles
    ledger = hooks.ledgers[TORCH]
    assert ledger.peak == 4 * MIB and ledger.untracked == 1


def on_a_thread_started_in_c(call: Callable[[object], None]) -> None:
    """call(None) on a thread made by pthread_create (through ctypes), as torch's autograd
    threads are: the call has no Python frame below it."""
    libc = ctypes.CDLL(None)
    start = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(call)  # no frame of its own
    thread = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(thread), None, start, None) == 0
    assert libc.pthread_join(thread, None) == 0


def test_a_torch_block_from_a_thread_with_no_python_frame_is_charged_not_lost(
    named, monkeypatch, capsys
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch)
    # torch's allocator fires its trace from the backward pass's thread: the registry's frame
    # (alloc, here) is the only one above kname's callback.
    on_a_thread_started_in_c(functools.partial(torch.alloc, 0x400, 2 * MIB))
    hooks.settle()
    assert hooks.ledgers[TORCH].site_dicts()[NO_PYTHON_FRAME]["allocated"] == 2 * MIB
    assert "charging a torch allocation" not in capsys.readouterr().err


def test_a_block_from_library_code_is_named_after_the_user_line_without_a_walk_once_cached(
    named, monkeypatch
):
    torch = StandInTorch(monkeypatch)
    hooks = torch_hooks(torch)
    walks = []
    stack = walk.stack
    monkeypatch.setattr(walk, "stack", lambda *args, **kw: walks.append(1) or stack(*args, **kw))

    class Tensor:  # copy.deepcopy (library code) calls its __deepcopy__: torch's registry
        def __init__(self, address: int) -> None:
            self.__deepcopy__ = functools.partial(torch.alloc, address, MIB)

    line = this_line(+2)
    for address in (0x100, 0x200, 0x300):
        copy.deepcopy(Tensor(address))  # the user's line, a library frame between
    hooks.settle()
    (name,) = hooks.ledgers[TORCH].site_dicts()
    assert name.endswith(f":{line}") and hooks.ledgers[TORCH].sites[name].allocations == 3
    assert len(walks) == 1  # kname's rules once, for the first; the cached site after


ADDRESSES = st.sampled_from([0x100, 0x200, 0x300])


@given(
    st.lists(st.tuples(ADDRESSES, st.integers(1, 1 << 40)), max_size=30),
    st.sampled_from(["whole", "missed", "extra"]),
)
def test_allocations_take_the_historys_sizes_at_their_address_in_order(allocations, history_is):
    events = []
    for address, _ in allocations:
        events += [(address, "a.py:1", 0, None), (address, None, 0, None)]
    history: dict[int, list[int]] = {}
    for address, size in allocations:
        history.setdefault(address, []).append(size)
    for address, sizes in history.items():
        # The history missed the first allocation there (a late callback), or has one more
        # at the end (a callback not come yet).
        history[address] = {"whole": sizes, "missed": sizes[1:], "extra": [*sizes, 7]}[history_is]
    sizes = sizes_of(events, history, {})
    seen: dict[int, int] = {}
    for (address, site, _, _), size in zip(events, sizes, strict=True):
        if site is None:
            assert size is None
            continue
        order = seen[address] = seen.get(address, -1) + 1
        if history_is == "missed" and order == 0:
            assert size is None  # freed since: not followed
        else:
            assert size == [n for a, n in allocations if a == address][order]


def test_a_size_known_when_it_came_is_kept_and_a_missed_block_still_held_takes_its_size():
    events = [(0x100, "a.py:1", 0, 512), (0x200, "a.py:2", 0, None), (0x300, "a.py:3", 0, None)]
    assert sizes_of(events, {0x300: [2048]}, {0x200: 1024}) == [512, 1024, 2048]
