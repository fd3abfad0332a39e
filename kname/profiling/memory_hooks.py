"""The pools' own views of memory: CuPy's and torch's allocator events, charged to lines.

torch's caching allocator and CuPy's pool keep freed blocks and hand them out again, so the
driver sees one cudaMalloc per segment, not one per tensor. Each pool has a hook of its own,
called on the allocating thread at each block handed out and taken back; the hook finds the
line by kname's rules (capture.site_of_frame) and charges it in that pool's Ledger (memory.py):

- CuPy: a cupy.cuda.MemoryHook (malloc_postprocess, free_postprocess): sizes as CuPy rounds
  them (up to 512 bytes). CuPy's hooks are per thread: this one sees the thread that started
  the profile.
- torch: the GPU trace's memory callbacks (torch.cuda._gpu_trace, on once
  torch._C._activate_gpu_trace() is called: the hook torch's CUDA sanitizer uses), which pass
  the block's address; its size is the change in torch.cuda.memory_allocated since the last
  event (torch rounds to 512 bytes). Every thread.

Each is put in place when its library is imported (importhooks.watch). A fault in a hook is one
line (report_fault) and the program's allocation goes on.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kname import importhooks
from kname._warnings import report_fault
from kname.profiling.capture import site_of_frame
from kname.profiling.memory import Ledger

CUPY, TORCH = "cupy", "torch"
POOLS = (CUPY, TORCH)


class PoolHooks:
    """The pools' hooks and their ledgers ({pool: Ledger}); start() watches for the libraries."""

    def __init__(self, site_of: Callable[[Any], str] = site_of_frame) -> None:
        self.ledgers: dict[str, Ledger] = {}
        self._site_of = site_of
        self._watches: list[Any] = []
        self._undo: list[Callable[[], None]] = []
        self.active = False

    def start(self) -> None:
        """Hook each pool once its library is imported (now, if it is)."""
        self.active = True
        self._watches = [
            importhooks.watch("cupy", self._hook_cupy),
            importhooks.watch("torch", self._hook_torch),
        ]

    def stop(self) -> None:
        """No event is charged after this (torch keeps its callback: it returns at once)."""
        self.active = False
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception as exc:
                report_fault("removing a memory hook", exc)
        self._undo.clear()

    def ledger(self, pool: str) -> Ledger:
        """`pool`'s ledger, made at its first event."""
        ledger = self.ledgers.get(pool)
        if ledger is None:
            ledger = self.ledgers[pool] = Ledger()
        return ledger

    def allocated(self, pool: str, frame: Any, address: int, size: int) -> None:
        """A block of `size` bytes at `address` handed out while `frame` ran."""
        if self.active:
            self.ledger(pool).allocate(self._site_of(frame), address, size, time.monotonic_ns())

    def freed(self, pool: str, address: int) -> None:
        """The block at `address` taken back."""
        if self.active:
            self.ledger(pool).free(address, time.monotonic_ns())

    # --- the libraries ------------------------------------------------------------------------

    def _hook_cupy(self, module: Any) -> None:
        try:
            hook = cupy_hook(module, self)
            hook.__enter__()
        except Exception as exc:
            report_fault("hooking CuPy's memory pool", exc)
            return
        entered_on = threading.get_ident()

        def undo() -> None:
            # CuPy's hooks are per thread: only the thread that entered it can take it out.
            # Elsewhere (a --duration timer) it stays, charging nothing (`active` is False).
            if threading.get_ident() == entered_on:
                hook.__exit__(None, None, None)

        self._undo.append(undo)

    def _hook_torch(self, module: Any) -> None:
        try:
            self._undo.append(torch_hook(module, self))
        except Exception as exc:
            report_fault("hooking torch's caching allocator", exc)


def cupy_hook(cupy: Any, hooks: PoolHooks) -> Any:
    """A cupy.cuda.MemoryHook charging `hooks`' CuPy ledger."""

    class KnameMemoryHook(cupy.cuda.MemoryHook):
        name = "kname"

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            try:
                hooks.allocated(CUPY, sys._getframe(1), mem_ptr, mem_size)
            except Exception as exc:
                report_fault("charging a CuPy allocation", exc)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            try:
                hooks.freed(CUPY, mem_ptr)
            except Exception as exc:
                report_fault("charging a CuPy free", exc)

    return KnameMemoryHook()


def torch_hook(torch: Any, hooks: PoolHooks) -> Callable[[], None]:
    """torch's GPU trace memory callbacks on, charging `hooks`' torch ledger; returns the undo
    (the callbacks stay registered, as torch has no way to remove them: they return at once)."""
    from torch.cuda import _gpu_trace

    allocated_bytes = torch.cuda.memory_allocated
    state = {"on": True, "last": None}

    def on_allocation(address: int) -> None:
        if not state["on"]:
            return
        try:
            now = allocated_bytes()
            last = state["last"]
            state["last"] = now
            if last is not None and now > last:
                hooks.allocated(TORCH, sys._getframe(1), address, now - last)
        except Exception as exc:
            report_fault("charging a torch allocation", exc)

    def on_free(address: int) -> None:
        if not state["on"]:
            return
        try:
            state["last"] = allocated_bytes()
            hooks.freed(TORCH, address)
        except Exception as exc:
            report_fault("charging a torch free", exc)

    state["last"] = allocated_bytes() if torch.cuda.is_initialized() else 0
    _gpu_trace.register_callback_for_memory_allocation(on_allocation)
    _gpu_trace.register_callback_for_memory_deallocation(on_free)
    torch._C._activate_gpu_trace()

    def undo() -> None:
        state["on"] = False

    return undo
