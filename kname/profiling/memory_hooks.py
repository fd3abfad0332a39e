"""The pools' own views of memory: CuPy's and torch's allocator events, charged to lines.

torch's caching allocator and CuPy's pool keep freed blocks and hand them out again, so the
driver sees one cudaMalloc per segment, not one per tensor. Each pool has a hook of its own,
called on the allocating thread at each block handed out and taken back; the hook finds the
line by kname's rules (capture.site_of_frame, its cached sites first, as the native recorder
finds a launch's: capture.cached_site; a backward block by its pass's line, and its forward
line's where one is known: memory_site_of_frame) and charges it in that pool's Ledger
(memory.py):

- CuPy: a cupy.cuda.MemoryHook (malloc_postprocess, free_postprocess): sizes as CuPy rounds
  them (up to 512 bytes). CuPy's hooks are per thread: this one sees the thread that started
  the profile.
- torch: its caching allocator's trace tracker (torch_tracker: C++ compiled on first use
  against the torch in use, attached as torch's CUDA starts; TrackedBlocks), which hands each
  block's address and size to kname's C inside torch's lock, no GIL taken, its line read from
  the thread's own frames, charged at each settle by kname's C ledger (kname._native_cupti.
  Ledger: memory.Ledger in C), which the view's Ledger is loaded from. Where it is turned off
  (KNAME_PROFILE_TORCH_TRACKER=0) or cannot be had (one line says why), the GPU trace's memory
  events are followed instead (torch.cuda._gpu_trace, on once torch._C._activate_gpu_trace() is
  called: the hook torch's CUDA sanitizer uses), which pass the block's address, with torch's
  allocation history without stacks for its size (TorchBlocks; torch rounds to 512 bytes).
  Every thread. kname's callables stand in for the registries' fire_callbacks (put_in_place: no
  frame of torch's per event); in C where kname._native_cupti is built (TorchMemory: no Python
  frame at all on a cached line), else in Python, both by the same rules.

Each is put in place when its library is imported (importhooks.watch). A fault in a hook is one
line (report_fault) and the program's allocation goes on.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kname import callsite, hotpath, importhooks
from kname._locks import new_lock
from kname._warnings import report_fault, warn_once
from kname.config import backward_lines_wanted, torch_tracker_wanted
from kname.documents.backward_lines import pass_unless_forward_known
from kname.profiling import backward, torch_tracker
from kname.profiling.capture import SITE_KEY, UNNAMED, site_of_frame
from kname.profiling.memory import MAX_BLOCKS, MAX_POINTS, Ledger

CUPY, TORCH = "cupy", "torch"
POOLS = (CUPY, TORCH)
TORCH_BATCH = 4096  # torch events waiting for their sizes before its history is read
TORCH_HISTORY = 65_536  # entries torch's history keeps (its max_entries)
HISTORY_SKIPS = [
    "free_requested",
    "free_completed",
]  # history actions not recorded, where torch can
FINDING = "finding the line of a torch allocation"  # the native path's words too


def memory_site_of_frame(frame: Any) -> str:
    """The name a block allocated while `frame` runs is charged to (None: no Python frame): its
    launch's name, but a backward block's forward line only where it is known (a block of no
    known forward line goes to its pass's row: backward per forward line off, or a node none
    was seen making)."""
    return pass_unless_forward_known(site_of_frame(frame))


class PoolHooks:
    """The pools' hooks and their ledgers ({pool: Ledger}); start() watches for the libraries."""

    def __init__(self, site_of: Callable[[Any], str] | None = None) -> None:
        self.ledgers: dict[str, Ledger] = {}
        self.site_of = site_of or memory_site_of_frame
        self.settlers: list[Callable[[], None]] = []  # events not charged yet, charged now
        self._watches: list[Any] = []
        self._undo: list[Callable[[], None]] = []
        self.switches: list[Callable[[bool], None]] = []  # told when `active` changes
        self._active = False

    @property
    def active(self) -> bool:
        """Whether events are charged (kept, for the native torch hook)."""
        return self._active

    @active.setter
    def active(self, on: bool) -> None:
        self._active = on
        for switch in self.switches:
            switch(on)

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


def torch_hook(torch: Any, hooks: PoolHooks, path: str | None = None) -> Callable[[], None]:
    """torch's blocks charged to `hooks`' torch ledger; returns the undo. `path`: "tracker"
    (torch's allocator trace tracker, TrackedBlocks), "native" (the GPU trace's memory callbacks
    kept by kname._native_cupti.TorchMemory), "python" (the same, in Python), or None: the
    tracker unless KNAME_PROFILE_TORCH_TRACKER is off, backward per forward line is on or this
    install's C lacks it, else native where the hot path has it (cupti_collector.choose's
    rule), else python. Where the tracker cannot be built or attached, one line says why and
    the GPU trace's hook takes over."""
    # With backward per forward line (KNAME_PROFILE_BACKWARD) the GPU trace's hook, which names
    # a backward block by its node's forward line under the GIL: that mode's cost per torch
    # call dwarfs the hook's per block.
    wanted = path is None and torch_tracker_wanted() and not backward_lines_wanted()
    if path == "tracker" or (wanted and tracker_memory() is not None):
        try:
            return tracked_hook(torch, hooks, fallback=path is None)
        except Exception as exc:  # not built, not loaded, or a torch unlike the one read here
            if path == "tracker":
                raise
            _say_hooked_instead(exc)
    return trace_hook(torch, hooks, path)


def _say_hooked_instead(exc: BaseException) -> None:
    warn_once(
        "torch tracker",
        f"kname profile --memory: torch's allocator tracker is not used ({exc}); torch's "
        "blocks are followed through its GPU trace instead (slower per block; "
        "KNAME_PROFILE_TORCH_TRACKER=0 chooses that without this line)",
    )


def tracker_memory() -> Any:
    """TorchMemory where it can take the tracker's events (kname._native_cupti built, a CPython
    whose frames C reads without the GIL), else None."""
    native = native_memory()
    return native if native is not None and hasattr(native, "track") else None


def tracked_hook(torch: Any, hooks: PoolHooks, fallback: bool) -> Callable[[], None]:
    """The tracker built (or taken from the cache) and attached once torch's CUDA starts (now,
    if it has); `fallback`: where attaching fails then, the GPU trace's hook takes over."""
    native = tracker_memory()
    if native is None:
        raise torch_tracker.TrackerUnavailable("kname._native_cupti has no TorchMemory here")
    tracker = torch_tracker.load(torch_tracker.torch_build(torch))
    blocks = TrackedBlocks(hooks, native, tracker)
    hooks.settlers.append(blocks.settle)
    undo: list[Callable[[], None]] = [blocks.stop]

    def attach() -> None:
        try:
            blocks.attach()
        except Exception as exc:
            blocks.stop()
            if not fallback:
                report_fault("attaching torch's allocator tracker", exc)
                return
            _say_hooked_instead(exc)
            try:
                undo.append(trace_hook(torch, hooks, None))
            except Exception as fault:
                report_fault("hooking torch's caching allocator", fault)

    torch.cuda._lazy_call(attach)  # now where CUDA has started, else as it starts

    def stop() -> None:
        for step in reversed(undo):
            step()

    return stop


def trace_hook(torch: Any, hooks: PoolHooks, path: str | None) -> Callable[[], None]:
    """torch's GPU trace memory callbacks on, charging `hooks`' torch ledger (TorchBlocks);
    returns the undo. `path`: as torch_hook's, but for the tracker."""
    from torch.cuda import _gpu_trace

    registries = (_gpu_trace.MemoryAllocationCallbacks, _gpu_trace.MemoryDeallocationCallbacks)
    native = native_memory() if path in (None, "native") else None
    if path == "native" and native is None:
        raise RuntimeError("kname._native_cupti has no TorchMemory here")
    blocks = TorchBlocks(torch, hooks, native)
    undo = put_in_place(registries, blocks.callbacks(registries))
    torch._C._activate_gpu_trace()
    hooks.settlers.append(blocks.settle)

    def stop() -> None:
        blocks.stop()
        undo()

    return stop


def native_memory() -> Any:
    """kname._native_cupti's TorchMemory type, or None where the hot path has no native CUPTI."""
    module, _ = hotpath.current().cupti()
    return getattr(module, "TorchMemory", None)


def native_ledger() -> Any:
    """kname._native_cupti's Ledger type (memory.Ledger in C), or None where it is not built."""
    module, _ = hotpath.current().cupti()
    return getattr(module, "Ledger", None)


def native_events(native: Any, hooks: PoolHooks, settle: Callable[[], None], batch: int) -> Any:
    """A TorchMemory (`native`) naming blocks by `hooks`' rules, calling settle() every `batch`."""
    return native(
        sites=callsite.sites,
        kinds=callsite._kinds,  # read-only, as the native recorder reads them
        site_key=SITE_KEY,
        site_of_frame=hooks.site_of,
        unnamed=UNNAMED,
        settle=settle,
        batch=batch,
    )


def put_in_place(registries: Sequence[Any], callbacks: Sequence[Callable[[int], None]]) -> Any:
    """Each callback as its registry's fire_callbacks, which torch's C++ looks up at each event
    (torch/csrc/PyInterpreter.cpp): called with the user's frame running, no frame of torch's
    registry between (each callback calls the registry's own after it, where others are
    registered); returns the undo."""
    for registry, callback in zip(registries, callbacks, strict=True):
        registry.fire_callbacks = callback

    def undo() -> None:
        for registry, callback in zip(registries, callbacks, strict=True):
            if registry.__dict__.get("fire_callbacks") is callback:
                del registry.fire_callbacks

    return undo


class TorchBlocks:
    """torch's blocks: the GPU trace's events say which block and which line (the Python frame
    that called into torch), torch's own allocation history says how big.

    The events are kept by kname._native_cupti.TorchMemory (in C, no Python frame per event:
    native) or by this class's own callbacks (Python); both name the line by
    capture.site_of_frame's rules. The history is recorded without stacks
    (torch.cuda.memory._record_memory_history with no context: about 0.5 us per allocation and
    free on the H100, where reading torch.cuda.memory_allocated at each event cost 270 us) and
    read every TORCH_BATCH events (at the first, until it records), then cleared; sizes_of pairs
    the two (torch records an allocation just before its callback)."""

    def __init__(self, torch: Any, hooks: PoolHooks, native: Any = None) -> None:
        self._torch = torch
        self._hooks = hooks
        # (address, site (None: a free), ns): the Python path's; the native one's in C
        self._pending: list[tuple[int, str | None, int]] = []
        self._lock = new_lock()
        self._recording = False
        self._on = True
        self._native = None
        if native is not None:
            self._native = native_events(native, hooks, self.settle, batch=1)
        if torch.cuda.is_initialized():  # else at the first event: no CUDA start at import
            self._record()
        self._batch(TORCH_BATCH if self._recording else 1)
        hooks.switches.append(lambda on: self._batch(self._batch_size))

    def callbacks(self, registries: Sequence[Any]) -> list[Callable[[int], None]]:
        """The allocation's and the free's callables, for put_in_place."""
        if self._native is not None:
            return [
                self._native.callback(is_free, registry.fire_callbacks, registry.callback_list)
                for is_free, registry in enumerate(registries)
            ]
        allocation, deallocation = registries
        then_allocation, then_free = allocation.fire_callbacks, deallocation.fire_callbacks

        def on_allocation(address: int) -> None:
            """A block handed out: charged to the frame that called into torch."""
            if self._on and self._hooks.active:
                try:
                    self._add(address, self._site(caller_frame(1)))
                except Exception as exc:
                    report_fault("charging a torch allocation", exc)
            if allocation.callback_list:
                then_allocation(address)

        def on_free(address: int) -> None:
            """A block taken back."""
            if self._on and self._hooks.active:
                try:
                    self._add(address, None)
                except Exception as exc:
                    report_fault("charging a torch free", exc)
            if deallocation.callback_list:
                then_free(address)

        return [on_allocation, on_free]

    def _site(self, frame: Any) -> str:
        """The line of an allocation made while `frame` ran; a fault is said once and the block
        is charged to UNNAMED, as the native path does."""
        try:
            return self._hooks.site_of(frame)
        except Exception as exc:
            report_fault(FINDING, exc)
            return UNNAMED

    def stop(self) -> None:
        """No event is kept after this."""
        self._on = False
        self._batch(self._batch_size)

    def settle(self) -> None:
        """The events so far into the ledger, sized from torch's history."""
        with self._lock:
            pending = self._take()
            if not pending:
                return
            snapshot = self._torch.cuda.memory._snapshot()
            self._record(clear=True)
        self._batch(TORCH_BATCH)
        sizes = sizes_of(pending, history_sizes(snapshot), held_blocks(snapshot))
        ledger = self._hooks.ledger(TORCH)
        events = [
            (address, site, time_ns, size)
            for (address, site, time_ns), size in zip(pending, sizes, strict=True)
            if site is None or size is not None
        ]
        ledger.untracked += len(pending) - len(events)  # blocks torch's history had no size for
        ledger.take(events)

    def _take(self) -> list[tuple[int, str | None, int]]:
        """The events waiting, taken; the native path's fault said (once) and its lost counted."""
        if self._native is None:
            pending, self._pending = self._pending, []
            return pending
        fault = self._native.take_fault()
        if fault is not None:
            report_fault(*fault)
        lost = self._native.take_lost()
        if lost:
            self._hooks.ledger(TORCH).untracked += lost
        return self._native.take()

    def _batch(self, batch: int) -> None:
        """Settled every `batch` events (1: the first, to start the history there)."""
        self._batch_size = batch
        if self._native is not None:
            self._native.set(self._on and self._hooks.active, batch)

    def _add(self, address: int, site: str | None) -> None:
        self._pending.append((address, site, time.time_ns()))
        if len(self._pending) >= self._batch_size:
            self.settle()

    def _record(self, clear: bool = False) -> None:
        """torch's history on, without stacks, bounded, of allocations only (cleared when
        `clear`; each where torch can)."""
        record = self._torch.cuda.memory._record_memory_history
        settings = {
            "enabled": "all",
            "context": None,
            "stacks": "python",
            "max_entries": TORCH_HISTORY,
        }
        # The frees come from the trace: their entries would only lengthen each read.
        for extra in (
            {"clear_history": clear, "skip_actions": HISTORY_SKIPS},
            {"clear_history": clear},
        ):
            try:
                record(**settings, **extra)
                break
            except (TypeError, ValueError):  # an older torch: without that setting
                continue
        else:
            record(**settings)
        self._recording = True


class TrackedBlocks:
    """torch's blocks from its allocator's trace tracker (torch_tracker): each block's line and
    size kept in C as torch hands it out (kname._native_cupti.TorchMemory.track), with no Python
    and no GIL there, handed over every TORCH_BATCH events and at each settle; no GPU trace, no
    history. A block allocated on autograd's threads (no Python frame) is named after the
    backward pass running (its forward line would need the GIL there: with backward per forward
    line on, torch_hook follows the GPU trace instead)."""

    def __init__(self, hooks: PoolHooks, native: Any, tracker: torch_tracker.Tracker) -> None:
        ledger = native_ledger()
        if ledger is None:
            raise torch_tracker.TrackerUnavailable("kname._native_cupti has no Ledger here")
        # The view's accounting in C (its events come by the thousand, each a tuple in Python
        # else), loaded into the view's memory.Ledger at each settle.
        self._ledger = ledger(MAX_POINTS, MAX_BLOCKS)
        self._lost = 0  # events lost on the way (no room), counted as untracked
        self._hooks = hooks
        self._tracker = tracker
        self._lock = new_lock()
        self._native = native_events(native, hooks, self.settle, TORCH_BATCH)
        self._sink = self._native.track(TORCH_BATCH)
        self._on = True
        self._native.set(hooks.active, TORCH_BATCH)
        hooks.switches.append(self._switch)
        self._unlisten = backward.listen_too(self._native.set_frameless)

    def attach(self) -> None:
        """torch's allocator hands its blocks over from now on."""
        self._tracker.attach(self._sink)

    def _switch(self, on: bool) -> None:
        self._native.set(self._on and on, TORCH_BATCH)

    def stop(self) -> None:
        """No block is kept after this (torch keeps the tracker, which returns at once)."""
        self._on = False
        self._native.set(False, TORCH_BATCH)
        self._tracker.off()
        self._unlisten()

    def settle(self) -> None:
        """The blocks so far into the ledger, in their order (one settle at a time)."""
        with self._lock:
            events = self._native.take_tracked_into(self._ledger)
            fault = self._native.take_fault()
            lost = self._native.take_lost()
            if fault is not None:
                report_fault(*fault)
            if not events and not lost:
                return
            self._lost += lost
            ledger = self._hooks.ledger(TORCH)
            ledger.load(self._ledger.state())
            ledger.untracked += self._lost


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
    events: Sequence[tuple[int, str | None, int]],
    history: Mapping[int, Sequence[int]],
    held: Mapping[int, int],
) -> list[int | None]:
    """Each event's size (None: a free, or an allocation not sized). The allocations at one
    address take the history's sizes there, in order. Where the history has fewer, those it
    missed are the first (their callback came after the last read cleared the history, or
    before the history started) and take the size of their block if it is still held and not
    freed since; where it has more, the extra are the last (allocated, their callback not come
    yet: the next read has them)."""
    sizes: list[int | None] = [None] * len(events)
    at: dict[int, list[int]] = {}
    freed_after: dict[int, int] = {}  # address -> the index of its last free
    for index, (address, site, _) in enumerate(events):
        if site is None:
            freed_after[address] = index
        else:
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
