"""A small torch training step, timed: what `kname profile --memory` adds to an allocation-heavy
loop (run by benchmarks/gpu_memory.py, interleaved under `kname profile` with and without it).

    python3 tests/gpu/memory_cost.py [STEPS]
    python3 tests/gpu/memory_cost.py kernels [LAUNCHES]

Two conv layers and two linear ones, Adam, cross-entropy, on a batch small enough that the step
is bound by the CPU (the worst case for a per-allocation cost); torch's caching allocator as
usual. Prints `STEP <ms per step>`, `ALLOCS <torch blocks handed out per step>`, `SEGMENTS
<cudaMalloc calls over the timed steps>` and `ALLOC <ns per torch.empty(4096) and its free>`.
`kernels`: a kernel-heavy loop instead, no allocation (one in-place add per launch): prints
`STEP <ms per 1000 launches>`, to time what --memory adds to the reading of kernel records.
With MEMORY_COST_NO_TORCH_HOOK=1 (under --memory only) kname's torch hook is left out, so that
the driver's side of --memory is timed alone; with MEMORY_COST_CPROFILE=FILE the timed steps
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


def main() -> int:
    if os.environ.get("MEMORY_COST_NO_TORCH_HOOK") == "1":
        leave_out_torch_hook()
    import torch

    if sys.argv[1:2] == ["kernels"]:
        return kernels(torch, int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
    return training(torch, int(sys.argv[1]) if len(sys.argv) > 1 else 300)


def kernels(torch, launches: int) -> int:
    """`launches` in-place adds on a small tensor, timed after a warm-up."""
    data = torch.zeros(1024, device="cuda")
    for _ in range(1000):
        data.add_(1.0)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(launches):
        data.add_(1.0)
    torch.cuda.synchronize()
    print(f"STEP {1e6 * (time.perf_counter() - started) / launches:.4f} ms")
    print("ALLOCS 0")
    return 0


def training(torch, steps: int) -> int:
    """`steps` training steps timed after a warm-up, and torch.empty's cost per block."""
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
    before = torch.cuda.memory_stats()
    profiler = None
    if os.environ.get("MEMORY_COST_CPROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    if profiler is not None:
        profiler.disable()
        print_top(profiler, os.environ["MEMORY_COST_CPROFILE"])
    after = torch.cuda.memory_stats()
    allocations = after["allocation.all.allocated"] - before["allocation.all.allocated"]
    segments = after["segment.all.allocated"] - before["segment.all.allocated"]
    print(f"STEP {1000 * elapsed / steps:.4f} ms")
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
