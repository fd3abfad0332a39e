"""The pools' own views of memory: CuPy's and torch's allocator events, charged to lines.

torch's caching allocator and CuPy's pool keep freed blocks and hand them out again, so the
driver sees one cudaMalloc per segment, not one per tensor. Each pool has a hook of its own,
called on the allocating thread at each block handed out and taken back; the hook finds the
line by kname's rules (capture.site_of_frame, its cached sites first, as the native recorder
finds a launch's: capture.cached_site) and charges it in that pool's Ledger (memory.py):

- CuPy: a cupy.cuda.MemoryHook (malloc_postprocess, free_postprocess): sizes as CuPy rounds
  them (up to 512 bytes). CuPy's hooks are per thread: this one sees the thread that started
  the profile.
- torch: the GPU trace's memory callbacks (torch.cuda._gpu_trace, on once
  torch._C._activate_gpu_trace() is called: the hook torch's CUDA sanitizer uses), which pass
  the block's address, and torch's allocation history without stacks for its size
  (TorchBlocks; torch rounds to 512 bytes). Every thread.

Each is put in place when its library is imported (importhooks.watch). A fault in a hook is one
line (report_fault) and the program's allocation goes on.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kname import importhooks
from kname._locks import new_lock
from kname._warnings import report_fault
from kname.profiling.capture import site_of_frame
from kname.profiling.memory import Ledger

CUPY, TORCH = "cupy", "torch"
POOLS = (CUPY, TORCH)
TORCH_BATCH = 4096  # torch events waiting for their sizes before its history is read
TORCH_HISTORY = 65_536  # entries torch's history keeps (its max_entries)


class PoolHooks:
    """The pools' hooks and their ledgers ({pool: Ledger}); start() watches for the libraries."""

    def __init__(self, site_of: Callable[[Any], str] | None = None) -> None:
        self.ledgers: dict[str, Ledger] = {}
        self.site_of = site_of or site_of_frame
        self.settlers: list[Callable[[], None]] = []  # events not charged yet, charged now
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
        self.settle()
        self.active = False
        for undo in reversed(self._undo):
            try:
                undo()
            except Exception as exc:
                report_fault("removing a memory hook", exc)
        self._undo.clear()

    def settle(self) -> None:
        """Every event so far charged (torch's wait for their sizes); never raises."""
        for settle in self.settlers:
            try:
                settle()
            except Exception as exc:
                report_fault("reading torch's allocation history", exc)

    def ledger(self, pool: str) -> Ledger:
        """`pool`'s ledger, made at its first event."""
        ledger = self.ledgers.get(pool)
        if ledger is None:
            ledger = self.ledgers[pool] = Ledger()
        return ledger

    def allocated(self, pool: str, frame: Any, address: int, size: int) -> None:
        """A block of `size` bytes at `address` handed out while `frame` ran."""
        if self.active:
            self.ledger(pool).allocate(self.site_of(frame), address, size, time.time_ns())

    def freed(self, pool: str, address: int) -> None:
        """The block at `address` taken back."""
        if self.active:
            self.ledger(pool).free(address, time.time_ns())

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
    """torch's GPU trace memory callbacks on, charging `hooks`' torch ledger (TorchBlocks);
    returns the undo (the callbacks stay registered, as torch has no way to remove them: they
    return at once)."""
    from torch.cuda import _gpu_trace

    blocks = TorchBlocks(torch, hooks)
    _gpu_trace.register_callback_for_memory_allocation(blocks.on_allocation)
    _gpu_trace.register_callback_for_memory_deallocation(blocks.on_free)
    torch._C._activate_gpu_trace()
    hooks.settlers.append(blocks.settle)
    return blocks.stop


class TorchBlocks:
    """torch's blocks: the GPU trace's callbacks say which block and which line (the Python
    frame that called into torch), torch's own allocation history says how big.

    The history is recorded without stacks (torch.cuda.memory._record_memory_history with no
    context: about 0.5 us per allocation and free on the H100, where reading
    torch.cuda.memory_allocated at each event cost 270 us) and read every TORCH_BATCH events,
    then cleared; sizes_of pairs the two (torch records an allocation just before its
    callback)."""

    def __init__(self, torch: Any, hooks: PoolHooks) -> None:
        self._torch = torch
        self._hooks = hooks
        # (address, site (None: a free), ns, size where known when it came)
        self._pending: list[tuple[int, str | None, int, int | None]] = []
        self._lock = new_lock()
        self._recording = False
        self._on = True
        if torch.cuda.is_initialized():  # else at the first event: no CUDA start at import
            self._record()

    def on_allocation(self, address: int) -> None:
        """A block handed out (the GPU trace's callback)."""
        if not (self._on and self._hooks.active):
            return
        try:
            frame = caller_frame(2)  # the frame that called into torch (1: torch's registry)
            self._add(address, self._hooks.site_of(frame))
        except Exception as exc:
            report_fault("charging a torch allocation", exc)

    def on_free(self, address: int) -> None:
        """A block taken back (the GPU trace's callback)."""
        if not (self._on and self._hooks.active):
            return
        try:
            self._add(address, None)
        except Exception as exc:
            report_fault("charging a torch free", exc)

    def stop(self) -> None:
        """No event is kept after this."""
        self._on = False

    def settle(self) -> None:
        """The events so far into the ledger, sized from torch's history."""
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return
            snapshot = self._torch.cuda.memory._snapshot()
            self._record(clear=True)
        sizes = sizes_of(pending, history_sizes(snapshot), held_blocks(snapshot))
        ledger = self._hooks.ledger(TORCH)
        for (address, site, time_ns, _), size in zip(pending, sizes, strict=True):
            if site is None:
                ledger.free(address, time_ns)
            elif size is None:
                ledger.untracked += 1
            else:
                ledger.allocate(site, address, size, time_ns)

    def _add(self, address: int, site: str | None) -> None:
        size = None
        if not self._recording:  # the first event: the history starts after it
            if site is not None:
                size = held_blocks(self._torch.cuda.memory._snapshot()).get(address)
            self._record()
        self._pending.append((address, site, time.time_ns(), size))
        if len(self._pending) >= TORCH_BATCH:
            self.settle()

    def _record(self, clear: bool = False) -> None:
        """torch's history on, without stacks, bounded (cleared when `clear`, where torch
        can)."""
        record = self._torch.cuda.memory._record_memory_history
        settings = {"enabled": "all", "context": None, "stacks": "python"}
        try:
            record(**settings, max_entries=TORCH_HISTORY, clear_history=clear)
        except TypeError:  # a torch without clear_history: the bound alone
            record(**settings, max_entries=TORCH_HISTORY)
        self._recording = True


def caller_frame(depth: int) -> Any:
    """The frame `depth` above the caller's, or None where the thread has fewer: torch's
    backward threads, started in C, call its trace with no Python frame below it (the line is
    then the backward pass's, as site_of_frame(None) finds it)."""
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None


def history_sizes(snapshot: dict) -> dict[int, list[int]]:
    """{address: the sizes of the allocations there, in the order torch's history has them}."""
    sizes: dict[int, list[int]] = {}
    for trace in snapshot.get("device_traces", ()):
        for entry in trace:
            if entry.get("action") == "alloc":
                sizes.setdefault(entry["addr"], []).append(entry["size"])
    return sizes


def held_blocks(snapshot: dict) -> dict[int, int]:
    """{address: size} of the blocks held now, from the snapshot's segments."""
    return {
        block["address"]: block["size"]
        for segment in snapshot.get("segments", ())
        for block in segment.get("blocks", ())
        if block.get("state") == "active_allocated"
    }


def sizes_of(
    events: Sequence[tuple[int, str | None, int, int | None]],
    history: Mapping[int, Sequence[int]],
    held: Mapping[int, int],
) -> list[int | None]:
    """Each event's size (None: a free, or an allocation not sized). An allocation whose size
    came with it keeps it; the others at one address take the history's sizes there, in order.
    Where the history has fewer, those it missed are the first (their callback came after the
    last read cleared the history) and take the size of their block if it is still held and
    not freed since; where it has more, the extra are the last (allocated, their callback not
    come yet: the next read has them)."""
    sizes: list[int | None] = [event[3] for event in events]
    at: dict[int, list[int]] = {}
    freed_after: dict[int, int] = {}  # address -> the index of its last free
    for index, (address, site, _, size) in enumerate(events):
        if site is None:
            freed_after[address] = index
        elif size is None:
            at.setdefault(address, []).append(index)
    for address, indices in at.items():
        known = history.get(address, ())
        missed = max(len(indices) - len(known), 0)
        for order, index in enumerate(indices):
            if order >= missed:
                sizes[index] = known[order - missed]
            elif freed_after.get(address, -1) < index:
                sizes[index] = held.get(address)
    return sizes
