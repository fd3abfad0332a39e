"""A small torch training step, timed: what `kname profile --memory` adds to an allocation-heavy
loop (run by benchmarks/gpu_memory.py, interleaved under `kname profile` with and without it).

    python3 tests/gpu/memory_cost.py [STEPS]
    python3 tests/gpu/memory_cost.py kernels [LAUNCHES]
    python3 tests/gpu/memory_cost.py floor

Two conv layers and two linear ones, Adam, cross-entropy, on a batch small enough that the step
is bound by the CPU (the worst case for a per-allocation cost); torch's caching allocator as
usual. Prints `STEP <ms per step>`, `ALLOCS <torch blocks handed out per step>`, `SEGMENTS
<cudaMalloc calls over the timed steps>` and `ALLOC <ns per torch.empty(4096) and its free>`.
`kernels`: a kernel-heavy loop instead, no allocation (one in-place CuPy add per launch):
prints `STEP <ms per 1000 launches>`, to time what --memory adds to the reading of kernel
records. `floor`: torch.empty and its free, timed as the torch view's pieces are added one by
one (its history, its GPU trace with no-op callbacks, kname's hook): `FLOOR <piece> <ns>`;
then the training step in blocks, kname's hook on and off in turn (`INPROC`). Run it under
`kname profile --memory` with MEMORY_COST_NO_TORCH_HOOK=1 (or under `kname profile`).
With MEMORY_COST_NO_TORCH_HOOK=1 (under --memory only) kname's torch hook is left out, so that
the driver's side of --memory is timed alone; with MEMORY_COST_TORCH_HOOK=python the hook takes
its Python path where the native one is built; with MEMORY_COST_CPROFILE=FILE the timed steps
run under cProfile and the top of it by own time is printed.
"""

from __future__ import annotations

import os
import sys
import time


def leave_out_torch_hook() -> None:
    """kname's torch hook made a no-op before torch is imported (a benchmark's split only)."""
    from kname.profiling import memory_hooks

    memory_hooks.torch_hook = lambda torch, hooks: lambda: None


def python_torch_hook() -> None:
    """kname's torch hook on its Python path, the native one (TorchMemory) left out."""
    from kname.profiling import memory_hooks

    memory_hooks.native_memory = lambda: None


def main() -> int:
    if os.environ.get("MEMORY_COST_NO_TORCH_HOOK") == "1":
        leave_out_torch_hook()
    if os.environ.get("MEMORY_COST_TORCH_HOOK") == "python":
        python_torch_hook()
    if sys.argv[1:2] == ["kernels"]:
        return kernels(int(sys.argv[2]) if len(sys.argv) > 2 else 200_000)
    import torch

    if sys.argv[1:2] == ["floor"]:
        return floor(torch)
    return training(torch, int(sys.argv[1]) if len(sys.argv) > 1 else 300)


def kernels(launches: int) -> int:
    """`launches` in-place adds on a small CuPy array (CuPy starts faster than torch), timed
    after a warm-up."""
    import cupy

    data = cupy.zeros(1024, dtype=cupy.float32)
    for _ in range(1000):
        data += 1
    cupy.cuda.Device().synchronize()
    started = time.perf_counter()
    for _ in range(launches):
        data += 1
    cupy.cuda.Device().synchronize()
    print(f"STEP {1e6 * (time.perf_counter() - started) / launches:.4f} ms")
    print("ALLOCS 0")
    return 0


def pairs_ns(torch, count: int = 4000) -> float:
    """ns per torch.empty(4096) and its free."""
    for _ in range(200):
        block = torch.empty(4096, device="cuda")
        del block
    started = time.perf_counter_ns()
    for _ in range(count):
        block = torch.empty(4096, device="cuda")
        del block
    return (time.perf_counter_ns() - started) / count


def floor(torch) -> int:
    """What each piece of the torch view costs per block, added one after another in this
    process (no --memory): torch bare, its history without stacks, its GPU trace with no-op
    callbacks, then kname's hook (memory_hooks.torch_hook) on top."""
    from torch.cuda import _gpu_trace

    from kname.profiling.memory_hooks import PoolHooks, torch_hook

    torch.empty(1, device="cuda")
    print(f"FLOOR bare {pairs_ns(torch):.0f} ns")
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None, stacks="python", max_entries=65_536
    )
    print(f"FLOOR history {pairs_ns(torch):.0f} ns")
    _gpu_trace.register_callback_for_memory_allocation(lambda address: None)
    _gpu_trace.register_callback_for_memory_deallocation(lambda address: None)
    torch._C._activate_gpu_trace()
    print(f"FLOOR trace {pairs_ns(torch):.0f} ns")
    hooks = PoolHooks()
    hooks.active = True
    torch_hook(torch, hooks)
    print(f"FLOOR kname {pairs_ns(torch):.0f} ns")
    hooks.settle()
    print(f"FLOOR blocks {sum(s.allocations for s in hooks.ledger('torch').sites.values())}")
    on_and_off(torch, hooks)
    return 0


def on_and_off(torch, hooks, rounds: int = 8, steps: int = 40) -> None:
    """The training step in blocks of `steps`, kname's torch hook charging (on) or returning at
    once (off: torch's history and trace still on), in a new order each round; prints the
    medians and the median of the per-round differences."""
    import random
    import statistics

    step = training_step(torch)
    times: dict[bool, list[float]] = {True: [], False: []}
    order = [True, False]
    for _ in range(rounds):
        random.shuffle(order)
        for active in order:
            hooks.active = active
            times[active].append(timed_steps(torch, step, steps))
    hooks.active = True
    added = statistics.median(on - off for on, off in zip(times[True], times[False], strict=True))
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"INPROC on {on:.4f} ms off {off:.4f} ms added {added:.4f} ms per step")


def training_step(torch):
    """The training step (two conv and two linear layers, Adam, cross-entropy), warmed up."""
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 16 * 16, 256),
        nn.ReLU(),
        nn.Linear(256, 10),
    ).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    images = torch.randn(64, 3, 16, 16, device="cuda")
    labels = torch.randint(0, 10, (64,), device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    return step


def timed_steps(torch, step, steps: int) -> float:
    """ms per step over `steps` steps."""
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - started) / steps


def training(torch, steps: int) -> int:
    """`steps` training steps timed after a warm-up, and torch.empty's cost per block."""
    step = training_step(torch)
    before = torch.cuda.memory_stats()
    profiler = None
    if os.environ.get("MEMORY_COST_CPROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    elapsed_ms = timed_steps(torch, step, steps)
    if profiler is not None:
        profiler.disable()
        print_top(profiler, os.environ["MEMORY_COST_CPROFILE"])
    after = torch.cuda.memory_stats()
    allocations = after["allocation.all.allocated"] - before["allocation.all.allocated"]
    segments = after["segment.all.allocated"] - before["segment.all.allocated"]
    print(f"STEP {elapsed_ms:.4f} ms")
    print(f"ALLOCS {allocations / steps:.1f}")
    print(f"SEGMENTS {segments}")
    started = time.perf_counter_ns()
    for _ in range(2000):
        block = torch.empty(4096, device="cuda")
        del block
    print(f"ALLOC {(time.perf_counter_ns() - started) / 2000:.0f} ns")
    return 0


def print_top(profiler, path: str, top: int = 14) -> None:
    """The profile's top functions by own time, printed, and the stats saved to `path`."""
    import io
    import pstats

    profiler.dump_stats(path)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    print(text.getvalue()[-4000:])


if __name__ == "__main__":
    sys.exit(main())
