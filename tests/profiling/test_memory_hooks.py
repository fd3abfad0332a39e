"""The pools' hooks (memory_hooks.py): each block charged to the line that asked for it.

CuPy and torch cannot allocate without a GPU: their hook interfaces are stood in for here by
the smallest objects with the same names (cupy.cuda.MemoryHook, entered per thread; torch's
GPU-trace registry and torch.cuda.memory_allocated), which call kname's hook the way the
libraries do (tests/gpu/test_gpu_memory.py runs the real ones).
"""

from __future__ import annotations

import sys
import threading
import types
from typing import ClassVar

import pytest

from kname import callsite
from kname.config import DEFAULT_FORMAT
from kname.profiling.memory_hooks import CUPY, TORCH, PoolHooks, cupy_hook, torch_hook

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


def torch_stand_in(monkeypatch, allocated: list[int]) -> types.SimpleNamespace:
    """torch's GPU trace registry (torch.cuda._gpu_trace) and memory_allocated()."""
    registry = types.SimpleNamespace(allocation=[], deallocation=[])
    trace = types.ModuleType("torch.cuda._gpu_trace")
    trace.register_callback_for_memory_allocation = registry.allocation.append
    trace.register_callback_for_memory_deallocation = registry.deallocation.append
    cuda = types.ModuleType("torch.cuda")
    cuda._gpu_trace = trace
    cuda.memory_allocated = lambda: allocated[0]
    cuda.is_initialized = lambda: False
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    torch._C = types.SimpleNamespace(_activate_gpu_trace=lambda: registry.__dict__.update(on=True))
    for name, module in (("torch", torch), ("torch.cuda", cuda), ("torch.cuda._gpu_trace", trace)):
        monkeypatch.setitem(sys.modules, name, module)
    torch.registry = registry
    return torch


def test_a_torch_block_is_sized_by_the_change_in_bytes_allocated(named, monkeypatch):
    allocated = [0]
    torch = torch_stand_in(monkeypatch, allocated)
    hooks = PoolHooks()
    hooks.active = True
    torch_hook(torch, hooks)
    assert torch.registry.on
    (on_allocation,), (on_free,) = torch.registry.allocation, torch.registry.deallocation
    allocated[0] = 16 * MIB
    line = this_line(+1)
    on_allocation(0x100)
    allocated[0] = 0
    on_free(0x100)
    (site,) = hooks.ledgers[TORCH].sites
    assert site.endswith(f":{line}")
    assert hooks.ledgers[TORCH].site_dicts()[site] == {
        "allocated": 16 * MIB, "allocations": 1, "freed": 16 * MIB, "frees": 1,
        "peak": 16 * MIB, "at_peak": 16 * MIB,
    }  # fmt: skip
