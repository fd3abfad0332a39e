"""GPU program for kname's memory per line: allocations from known lines, through each allocator.

Each line marked `# mem: TAG SOURCE BYTES` allocates BYTES through SOURCE: the driver (raw
cudaMalloc, cudaMallocAsync, cudaMallocManaged and cudaHostAlloc through cuda-bindings; numba's
device arrays, which numba's default memory manager takes from cuMemAlloc one by one), torch's
caching allocator, CuPy's pool. Sizes are whole MiB, so no pool rounds them (torch rounds to 512
bytes and its segments to 2 MiB; CuPy to 512 bytes). Everything is held at once (the process's
peak: the line `torch_peak` holds the most there), then freed, each from a `# free: TAG` line.

    python3 tests/gpu/memory_demo.py [LIBRARY...]   run it (under `kname profile` or the
                                                    recorder); LIBRARY: driver, numba, cupy, torch

Prints `EXPECT <tag> <source> <bytes> <alloc line> <free line>` per allocation, read by
tests/gpu/test_gpu_memory.py and tests/gpu/memory_record.py.
"""

from __future__ import annotations

import gc
import re
import sys
from pathlib import Path

MIB = 1 << 20
LIBRARIES = ("driver", "numba", "cupy", "torch")
MARK = re.compile(r"# (mem: ([a-z_]+) (\w+) (\d+)|free: ([a-z_]+))$")


def marked_lines() -> dict[str, dict]:
    """{tag: {"source", "bytes", "alloc", "free"}} from this file's `# mem:` / `# free:` marks."""
    lines: dict[str, dict] = {}
    for number, text in enumerate(Path(__file__).read_text().splitlines(), 1):
        match = MARK.search(text)
        if match is None:
            continue
        if match.group(2):
            entry = lines.setdefault(match.group(2), {})
            entry.update(source=match.group(3), bytes=int(match.group(4)), alloc=number)
        else:
            lines.setdefault(match.group(5), {})["free"] = number
    return lines


def check(err) -> None:
    """Raise on a cuda-bindings error status (the first item of its result)."""
    status = err[0] if isinstance(err, tuple) else err
    if int(status) != 0:
        raise RuntimeError(f"CUDA error {status}")


def driver_allocations(held: dict) -> None:
    from cuda.bindings import runtime as rt

    err, stream = rt.cudaStreamCreate()
    check(err)
    held["raw_malloc"] = rt.cudaMalloc(8 * MIB)  # mem: raw_malloc driver 8388608
    held["raw_async"] = rt.cudaMallocAsync(6 * MIB, stream)  # mem: raw_async driver 6291456
    check(rt.cudaStreamSynchronize(stream))
    held["raw_managed"] = rt.cudaMallocManaged(4 * MIB, 1)  # mem: raw_managed driver 4194304
    held["raw_pinned"] = rt.cudaHostAlloc(2 * MIB, 0)  # mem: raw_pinned driver 2097152
    for name in ("raw_malloc", "raw_async", "raw_managed", "raw_pinned"):
        check(held[name])
    held["stream"] = stream


def free_driver(held: dict) -> None:
    from cuda.bindings import runtime as rt

    stream = held["stream"]
    check(rt.cudaFree(held["raw_malloc"][1]))  # free: raw_malloc
    check(rt.cudaFreeAsync(held["raw_async"][1], stream))  # free: raw_async
    check(rt.cudaStreamSynchronize(stream))
    check(rt.cudaFree(held["raw_managed"][1]))  # free: raw_managed
    check(rt.cudaFreeHost(held["raw_pinned"][1]))  # free: raw_pinned


def run(libraries: set[str]) -> None:
    """Allocate from every marked line of the libraries present, hold, free."""
    held: dict = {}
    if "driver" in libraries:
        driver_allocations(held)
    if "numba" in libraries:
        from numba import cuda

        held["numba_array"] = cuda.device_array(3 * MIB, "u1")  # mem: numba_array driver 3145728
    if "cupy" in libraries:
        import cupy

        held["cupy_array"] = cupy.empty(24 * MIB, "u1")  # mem: cupy_array cupy 25165824
    if "torch" in libraries:
        import torch

        on_gpu = {"dtype": torch.uint8, "device": "cuda"}
        held["torch_small"] = torch.empty(16 * MIB, **on_gpu)  # mem: torch_small torch 16777216
        held["torch_peak"] = torch.empty(96 * MIB, **on_gpu)  # mem: torch_peak torch 100663296
        torch.cuda.synchronize()
    # Everything is held here: the process's peak.
    if "torch" in libraries:
        del held["torch_peak"]  # free: torch_peak
        del held["torch_small"]  # free: torch_small
    if "cupy" in libraries:
        del held["cupy_array"]  # free: cupy_array
    if "numba" in libraries:
        del held["numba_array"]  # numba's free waits in its memory manager's pending list
        gc.collect()
        numba_churn()
    if "driver" in libraries:
        free_driver(held)


def numba_churn() -> None:
    """Small device arrays made and dropped, as a loop does, until numba's pending frees pass
    its count (CUDA_DEALLOCS_COUNT) and it runs them all, numba_array's first. numba's default
    memory manager defers every cuMemFree to its own pending list (memory_manager.deallocations,
    not the context's `deallocations`), run past that count or size, at an out-of-memory retry
    or a reset."""
    from numba import cuda

    context = cuda.current_context()
    pending = getattr(context, "memory_manager", context).deallocations
    waiting = len(pending)  # 1: numba_array's
    made = 0
    while len(pending) and made < 10_000:
        cuda.device_array(256, "u1")  # free: numba_array
        made += 1
    print(f"NUMBA pending frees {waiting}, run after {made} arrays made and dropped")


def available() -> set[str]:
    """The libraries importable here (the driver through cuda-bindings)."""
    found = set()
    for library, module in (
        ("driver", "cuda.bindings.runtime"),
        ("numba", "numba.cuda"),
        ("cupy", "cupy"),
        ("torch", "torch"),
    ):
        try:
            __import__(module)
        except Exception as exc:
            print(f"SKIP {library}: {type(exc).__name__}: {exc}")
            continue
        found.add(library)
    return found


def main() -> int:
    libraries = available() & set(sys.argv[1:] or LIBRARIES)
    for tag, entry in marked_lines().items():
        source = "driver" if tag.startswith("raw") else tag.split("_")[0]
        if source in libraries:
            print(
                f"EXPECT {tag} {entry['source']} {entry['bytes']} {entry['alloc']} {entry['free']}"
            )
    run(libraries)
    print("MEMORY DEMO DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
