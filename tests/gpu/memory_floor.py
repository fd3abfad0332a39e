"""Where the cost of kname's torch hook goes: torch.empty(4096) and its free, timed with each
piece of the torch view on alone (no kname profile around it).

    python3 tests/gpu/memory_floor.py [PAIRS]
    python3 -m kname profile -- python3 tests/gpu/memory_floor.py step
    python3 -m kname profile -- python3 tests/gpu/memory_floor.py tracker-step
    python3 tests/gpu/memory_floor.py tracker [PAIRS]   (the tracker's rows and kname's hooks)

Prints `FLOOR <piece> <ns per pair>` for: torch bare; its allocation history without stacks;
with Python stacks (and what reading them back from the snapshot costs per entry, and whether
they hold the user's line); its GPU trace with no callback, a Python one, a C one (a list's
append) in torch's registry; the registry's fire_callbacks replaced by the callable itself (no
Python frame of torch's: the C++ side's import, attribute look-ups and call alone), Python and C;
then kname's hooks, each with the history on (sizes): the Python one (memory_hooks.TorchBlocks)
and, where built, the C one (memory_hooks.torch_hook's native path). Before the GPU trace is on
(torch cannot turn it off): torch's allocator tracker (torch_tracker, its compile time once)
attached and handing nothing over, handing each block to kname's C, and kname's whole tracked
hook (memory_hooks.TrackedBlocks, into the ledger).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def pairs_ns(torch, count: int) -> float:
    """ns per torch.empty(4096) and its free, after a warm-up."""
    for _ in range(200):
        block = torch.empty(4096, device="cuda")
        del block
    best = float("inf")
    for _ in range(3):  # the best of three: the floor, not the noise
        started = time.perf_counter_ns()
        for _ in range(count):
            block = torch.empty(4096, device="cuda")
            del block
        best = min(best, (time.perf_counter_ns() - started) / count)
    return best


def say(piece: str, ns: float) -> None:
    print(f"FLOOR {piece:24} {ns:8.0f} ns", flush=True)


SKIP = ["free_requested", "free_completed", "segment_alloc", "segment_free"]


def history(torch, stacks: str | None) -> None:
    record = torch.cuda.memory._record_memory_history
    if stacks is None:
        record(enabled=None)
    elif stacks == "none":
        record(enabled="all", context=None, stacks="python", max_entries=65_536)
    elif stacks == "allocs only":  # torch's skip_actions, where it has them
        record(enabled="all", context=None, stacks="python", max_entries=65_536, skip_actions=SKIP)
    else:
        record(enabled="all", context="alloc", stacks=stacks, max_entries=65_536)


def snapshot_read(torch, piece: str) -> None:
    """4096 pairs into the history as it is set now, then the snapshot's read per entry."""
    torch.cuda.memory._record_memory_history(enabled=None)
    history(torch, piece)
    for _ in range(4096):
        block = torch.empty(4096, device="cuda")  # MARK-LINE
        del block
    started = time.perf_counter_ns()
    snapshot = torch.cuda.memory._snapshot()
    took = time.perf_counter_ns() - started
    entries = [e for trace in snapshot["device_traces"] for e in trace]
    say(f"snapshot/entry({piece})", took / max(len(entries), 1))
    allocs = [e for e in entries if e["action"] == "alloc"]
    frames = allocs[-1].get("frames", []) if allocs else []
    print(
        f"SNAPSHOT {piece}: {len(entries)} entries, {sorted({e['action'] for e in entries})}, "
        f"the last alloc's frames: {frames[:3]}"
    )
    history(torch, None)


def stacks_read_back(torch, count: int) -> None:
    """The history with Python stacks: its cost per pair, the snapshot's read per entry, and
    whether an entry's frames name this line."""
    history(torch, "python")
    say("history+stacks", pairs_ns(torch, count))
    snapshot_read(torch, "python")
    snapshot_read(torch, "none")
    import inspect

    print(f"HISTORY {inspect.signature(torch.cuda.memory._record_memory_history)}")
    try:
        history(torch, "allocs only")
        say("history, allocs only", pairs_ns(torch, count))
        snapshot_read(torch, "allocs only")
    except Exception as exc:
        print(f"HISTORY allocs only: {exc!r}")
        history(torch, None)


def tracker_pieces(torch, count: int) -> None:
    """torch's allocator tracker, no GPU trace: kname's tracker built (or taken from the cache)
    and attached, handing nothing over; handing each block to kname's C (lines found, events
    kept, charged every batch by the C ledger: take_tracked_into); kname's whole tracked hook
    (TrackedBlocks: the same, the view's Python ledger loaded at each settle)."""
    from kname import callsite
    from kname.profiling import capture, memory_hooks, torch_tracker

    native = memory_hooks.tracker_memory()
    try:
        started = time.perf_counter()
        tracker = torch_tracker.load(torch_tracker.torch_build(torch))
        took = time.perf_counter() - started
    except Exception as exc:
        print(f"FLOOR tracker: not built: {exc}")
        return
    print(f"TRACKER compiled in {tracker.compile_seconds} s (None: cached), ready in {took:.2f} s")
    if native is None:
        print("FLOOR tracker: kname._native_cupti cannot take its events here")
        return
    taken: list[int] = []
    ledger = memory_hooks.native_ledger()()
    alone = native(
        sites=callsite.sites, kinds=callsite._kinds, site_key=capture.SITE_KEY,
        site_of_frame=capture.site_of_frame, unnamed=capture.UNNAMED,
        settle=lambda: taken.append(alone.take_tracked_into(ledger)), batch=4096,
    )  # fmt: skip
    sink = alone.track(4096)
    tracker.attach(sink)
    tracker.off()
    say("tracker, nothing handed", pairs_ns(torch, count))
    tracker.attach(sink)
    say("tracker, kname C and C ledger", pairs_ns(torch, count))
    misses = alone.take_misses()
    events = alone.take_tracked()
    sites = sorted({site for _, site, _, _ in events if site})
    print(f"TRACKER events {len(events) + sum(taken)} misses {misses} sites {sites[:3]}")
    tracker.off()
    alone.set(False, 4096)
    hooks = memory_hooks.PoolHooks()
    hooks.active = True
    undo = memory_hooks.torch_hook(torch, hooks, path="tracker")
    say("kname tracker", pairs_ns(torch, count))
    hooks.settle()
    ledger = hooks.ledger("torch")
    print(
        f"KNAME tracker blocks {sum(s.allocations for s in ledger.sites.values())} "
        f"sites {sorted(ledger.sites)[:3]} unmatched {ledger.unmatched_frees}"
    )
    hooks.stop()
    undo()


def trace_pieces(torch, count: int) -> None:
    """The GPU trace: registry callbacks, then fire_callbacks replaced."""
    from torch.cuda import _gpu_trace

    allocation = _gpu_trace.MemoryAllocationCallbacks
    deallocation = _gpu_trace.MemoryDeallocationCallbacks
    torch._C._activate_gpu_trace()
    say("trace, no callback", pairs_ns(torch, count))
    allocation.add_callback(lambda address: None)
    deallocation.add_callback(lambda address: None)
    say("trace, Python callback", pairs_ns(torch, count))
    seen: list[int] = []
    allocation.callback_list[:] = [seen.append]
    deallocation.callback_list[:] = [seen.append]
    say("trace, C callback", pairs_ns(torch, count))
    allocation.callback_list.clear()
    deallocation.callback_list.clear()
    lines: list[int] = []

    def where(address: int) -> None:
        lines.append(sys._getframe(1).f_lineno)

    allocation.fire_callbacks = deallocation.fire_callbacks = where
    torch.empty(4096, device="cuda")  # LINE-CHECK
    print(f"DIRECT frame above a direct Python callback: line {lines[:2]}")
    allocation.fire_callbacks = deallocation.fire_callbacks = lambda address: None
    say("direct, Python callable", pairs_ns(torch, count))
    seen.clear()
    allocation.fire_callbacks = deallocation.fire_callbacks = seen.append
    say("direct, C callable", pairs_ns(torch, count))
    print(f"DIRECT events {len(seen)}")
    history(torch, "none")
    say("direct C + history", pairs_ns(torch, count))
    history(torch, None)
    c_hook_alone(torch, count, allocation, deallocation)
    del allocation.fire_callbacks, deallocation.fire_callbacks


def c_hook_alone(torch, count: int, allocation, deallocation) -> None:
    """kname's C callables (TorchMemory) in place, its events dropped at each batch: no
    history, no ledger."""
    from kname import callsite
    from kname.profiling import capture, memory_hooks

    native = memory_hooks.native_memory()
    if native is None:
        print("FLOOR C hook alone: not built")
        return
    taken = []
    events = native(
        sites=callsite.sites, kinds=callsite._kinds, site_key=capture.SITE_KEY,
        site_of_frame=capture.site_of_frame, unnamed=capture.UNNAMED,
        settle=lambda: taken.append(len(events.take())), batch=4096,
    )  # fmt: skip
    allocation.fire_callbacks = events.callback(False, allocation.fire_callbacks, [])
    deallocation.fire_callbacks = events.callback(True, deallocation.fire_callbacks, [])
    say("direct kname C, no history", pairs_ns(torch, count))
    print(f"C HOOK sites {sorted({site for _, site, _ in events.take() if site})[:3]}")


def kname_hooks(torch, count: int) -> None:
    """kname's torch hooks, the Python one and (where built) the C one, each charging."""
    from torch.cuda import _gpu_trace

    from kname.profiling import memory_hooks

    for path in ("python", "native"):
        _gpu_trace.MemoryAllocationCallbacks.callback_list.clear()
        _gpu_trace.MemoryDeallocationCallbacks.callback_list.clear()
        hooks = memory_hooks.PoolHooks()
        hooks.active = True
        try:
            undo = memory_hooks.torch_hook(torch, hooks, path=path)
        except TypeError:  # a kname without the choice: its one hook
            if path == "native":
                continue
            undo = memory_hooks.torch_hook(torch, hooks)
        except Exception as exc:
            print(f"FLOOR kname {path}: not hooked: {exc!r}")
            continue
        say(f"kname {path}", pairs_ns(torch, count))
        hooks.settle()
        ledger = hooks.ledger("torch")
        print(
            f"KNAME {path} blocks {sum(s.allocations for s in ledger.sites.values())} "
            f"sites {sorted(ledger.sites)[:3]} unmatched {ledger.unmatched_frees}"
        )
        hooks.stop()
        undo()
        history(torch, None)


def step_pieces(torch, rounds: int = 8, steps: int = 40) -> None:
    """tests/gpu/memory_cost.py's training step in blocks of `steps`, ms per step (medians of
    `rounds`, the pieces in a new order each round): torch bare first (its trace cannot be
    turned off once on), then, the history on, each put in place as fire_callbacks in turn:
    torch's trace calling C no-ops; kname's C callables with no settle (events dropped); kname's
    C hook; the same, a backward block named without Python's look-up; kname's Python hook.
    Run under `kname profile` (no --memory) for the backward pass's names."""
    import random
    import statistics

    from torch.cuda import _gpu_trace

    from kname import callsite
    from kname.documents.backward_lines import BACKWARD_OF
    from kname.profiling import memory_hooks
    from kname.profiling.capture import NO_PYTHON_FRAME, SITE_KEY, UNNAMED, site_of_frame

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_cost import timed_steps, training_step

    step = training_step(torch)
    bare = statistics.median(timed_steps(torch, step, steps) for _ in range(rounds))
    print(f"STEP bare {bare:.4f} ms")
    registries = (_gpu_trace.MemoryAllocationCallbacks, _gpu_trace.MemoryDeallocationCallbacks)
    pieces, ledgers = {}, {}

    def no_pass_naming(frame):  # a backward block named without Python's look-up
        return NO_PYTHON_FRAME if frame is None else site_of_frame(frame)

    for name, path, site_of in (
        ("native", "native", None),
        ("python", "python", None),
        ("native, backward named in no time", "native", no_pass_naming),
    ):
        hooks = memory_hooks.PoolHooks(site_of=site_of)
        hooks.active = True
        memory_hooks.torch_hook(torch, hooks, path=path)
        pieces[name] = [registry.fire_callbacks for registry in registries]
        ledgers[name] = hooks
        for registry in registries:
            del registry.fire_callbacks
    dropped: list[int] = []
    pieces["trace, history"] = [dropped.append, dropped.append]
    alone = memory_hooks.native_memory()(
        sites=callsite.sites, kinds=callsite._kinds, site_key=SITE_KEY,
        site_of_frame=site_of_frame, unnamed=UNNAMED,
        settle=lambda: dropped.append(len(alone.take())), batch=4096,
    )  # fmt: skip
    pieces["C hook, no settle"] = [
        alone.callback(i, r.fire_callbacks, []) for i, r in enumerate(registries)
    ]
    times: dict[str, list[float]] = {name: [] for name in pieces}
    order = list(pieces)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            for registry, callback in zip(registries, pieces[name], strict=True):
                registry.fire_callbacks = callback
            ms = timed_steps(torch, step, steps)
            # kname's pieces settle their events now, timed with them; the history is then
            # cleared, so that no piece reads another's entries (they share torch's one).
            started = time.perf_counter()
            if name in ledgers:
                ledgers[name].settle()
            times[name].append(ms + 1000 * (time.perf_counter() - started) / steps)
            torch.cuda.memory._record_memory_history(
                enabled="all", context=None, stacks="python", max_entries=65_536,
                clear_history=True, skip_actions=memory_hooks.HISTORY_SKIPS,
            )  # fmt: skip
            dropped.clear()
    for name, measured in times.items():
        ms = statistics.median(measured)
        print(f"STEP {name:34} {ms:.4f} ms  +{ms - bare:.4f} ms over bare")
    hooks = ledgers["native"]
    hooks.settle()
    sites = hooks.ledger("torch").sites
    total = sum(memory.allocations for memory in sites.values()) or 1
    frameless = sum(m.allocations for name, m in sites.items() if BACKWARD_OF in name)
    print(f"STEP blocks charged {total}, on backward lines {frameless} ({frameless / total:.0%})")
    for name, memory in sorted(sites.items(), key=lambda item: -item[1].allocations)[:6]:
        print(f"STEP site {memory.allocations:6} {name[:150]}")


def tracker_step(torch, rounds: int = 6, steps: int = 60) -> None:
    """tests/gpu/memory_cost.py's training step in blocks of `steps`, ms per step (medians of
    `rounds`): bare (no tracker yet), then in turn kname's tracked hook (TrackedBlocks into the
    ledger, its settle timed with it) and the tracker attached handing nothing over (torch's
    trace entries alone); the blocks whose line was not known in C as they came, per step once
    warm; the blocks by line. Run under `kname profile` (no --memory) for the backward pass's
    names."""
    import statistics

    from kname.profiling import memory_hooks, torch_tracker

    sys.path.insert(0, str(Path(__file__).parent))
    from memory_cost import timed_steps, training_step

    step = training_step(torch)
    bare = statistics.median(timed_steps(torch, step, steps) for _ in range(rounds))
    hooks = memory_hooks.PoolHooks()
    hooks.active = True
    tracker = torch_tracker.load(torch_tracker.torch_build(torch))
    blocks = memory_hooks.TrackedBlocks(hooks, memory_hooks.tracker_memory(), tracker)
    hooks.settlers.append(blocks.settle)
    blocks.attach()
    timed_steps(torch, step, steps)  # warm: each line's first block named
    hooks.settle()
    blocks._native.take_misses()
    on, off = [], []
    for _ in range(rounds):
        tracker.attach(blocks._sink)
        started = time.perf_counter()
        timed_steps(torch, step, steps)
        hooks.settle()
        on.append(1000 * (time.perf_counter() - started) / steps)
        tracker.off()
        off.append(timed_steps(torch, step, steps))
    misses = blocks._native.take_misses() / (rounds * steps)
    on_ms, off_ms = statistics.median(on), statistics.median(off)
    print(f"TSTEP bare {bare:.4f} ms")
    print(f"TSTEP tracker attached, nothing handed {off_ms:.4f} ms ({off_ms / bare - 1:+.1%})")
    print(f"TSTEP kname tracker, ledger {on_ms:.4f} ms ({on_ms / bare - 1:+.1%})")
    print(f"TSTEP blocks not known in C as they came, per step: {misses:.2f}")
    sites = hooks.ledger("torch").sites
    for name, memory in sorted(sites.items(), key=lambda item: -item[1].allocations)[:8]:
        print(f"TSTEP site {memory.allocations:6} {memory.frees:6} {name[:150]}")
    blocks.stop()


def main() -> int:
    import torch

    if sys.argv[1:2] == ["step"]:
        torch.empty(1, device="cuda")
        step_pieces(torch)
        return 0
    if sys.argv[1:2] == ["tracker-step"]:
        torch.empty(1, device="cuda")
        tracker_step(torch)
        return 0
    if sys.argv[1:2] == ["tracker"]:  # the tracker's rows and kname's GPU-trace hooks alone
        count = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
        torch.empty(1, device="cuda")
        print(f"torch {torch.__version__}", flush=True)
        say("bare", pairs_ns(torch, count))
        tracker_pieces(torch, count)
        say("bare, tracker off", pairs_ns(torch, count))
        kname_hooks(torch, count)
        return 0
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    torch.empty(1, device="cuda")
    print(f"torch {torch.__version__}", flush=True)
    say("bare", pairs_ns(torch, count))
    history(torch, "none")
    say("history, no stacks", pairs_ns(torch, count))
    history(torch, None)
    stacks_read_back(torch, count)
    say("bare again", pairs_ns(torch, count))
    tracker_pieces(torch, count)
    say("bare, tracker off", pairs_ns(torch, count))
    trace_pieces(torch, count)
    kname_hooks(torch, count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
