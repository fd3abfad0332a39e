"""Records CUPTI's memory records of tests/gpu/memory_demo.py, and probes the allocator hooks.

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 tests/gpu/memory_record.py OUT_DIR

Through cupti-python alone (not kname's collector): the driver and runtime memory APIs' callbacks
(their correlation id, the API, the demo line that called it) and CUPTI's MEMORY2 and MEMORY_POOL
activity records, written raw to OUT_DIR/memory_raw.json (tests/data/ keeps them as a fixture for
the join). Then, without CUPTI: which allocator hooks torch offers and what they pass, CuPy's
MemoryHook, and the CPU cost per allocation of each (`COST <what> <ns per allocation>`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import memory_demo

DEMO = memory_demo.__file__
MEMORY_APIS = (
    "cuMemAlloc", "cuMemFree", "cuMemHostAlloc", "cuMemAllocHost", "cuMemFreeHost",
    "cuMemAllocManaged", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync",
    "cuMemAllocPitch", "cuMemCreate", "cuMemRelease", "cudaMalloc", "cudaFree", "cudaHostAlloc",
    "cudaMallocHost", "cudaFreeHost", "cudaMallocManaged", "cudaMallocAsync", "cudaFreeAsync",
    "cudaMallocFromPoolAsync", "cudaMallocPitch",
)  # fmt: skip


SHOWN = ("kind", "correlation_id", "memory_operation_type", "memory_kind", "bytes", "is_async")


def demo_line() -> int:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == DEMO:
            return frame.f_lineno
        frame = frame.f_back
    return 0


def record(out: Path) -> None:
    from cupti import cupti

    calls: list[dict] = []
    records: list[dict] = []
    open_calls = threading.local()
    apis = {}
    for domain, table in (
        (cupti.CallbackDomain.DRIVER_API, cupti.driver_api_trace_cbid),
        (cupti.CallbackDomain.RUNTIME_API, cupti.runtime_api_trace_cbid),
    ):
        for name, cbid in table.__members__.items():
            if name.split("_v")[0].split("_ptsz")[0] in MEMORY_APIS or name.startswith(MEMORY_APIS):
                apis[(int(domain), int(cbid))] = name
    enter = int(cupti.ApiCallbackSite.API_ENTER)

    def on_api(userdata, domain, cbid, data):
        stack = getattr(open_calls, "stack", None)
        if stack is None:
            stack = open_calls.stack = []
        if data.callback_site == enter:
            calls.append(
                {
                    "correlation_id": data.correlation_id,
                    "api": apis[(int(domain), int(cbid))],
                    "line": demo_line(),
                    "parent": stack[-1] if stack else 0,
                    "thread": threading.get_ident(),
                }
            )
            stack.append(data.correlation_id)
        elif stack:
            stack.pop()

    def requested():
        return 8 << 20, 0

    def completed(activities):
        for a in activities:
            row = {"kind": int(a.kind)}
            for field in (
                "correlation_id", "memory_operation_type", "memory_kind", "address", "bytes",
                "timestamp", "device_id", "context_id", "stream_id", "is_async", "name", "source",
                "memory_pool_operation_type", "memory_pool_type", "size_", "utilized_size",
                "release_threshold", "min_bytes_to_keep", "process_id",
            ):  # fmt: skip
                try:
                    value = getattr(a, field)
                except Exception:
                    continue
                row[field] = value if isinstance(value, (int, str)) or value is None else str(value)
            try:
                config = a.memory_pool_config
                row["pool"] = {
                    k: str(getattr(config, k))
                    for k in dir(config)
                    if not k.startswith("_") and not callable(getattr(config, k))
                }
            except Exception:
                pass
            records.append(row)

    subscriber = cupti.subscribe(on_api, None)
    for domain, cbid in apis:
        cupti.enable_callback(1, subscriber, domain, cbid)
    cupti.activity_register_callbacks(requested, completed)
    for kind in ("MEMORY2", "MEMORY_POOL"):
        cupti.activity_enable(getattr(cupti.ActivityKind, kind))
    libraries = memory_demo.available()
    started = time.perf_counter()
    run_demo(libraries)
    print(f"RAN demo under CUPTI in {time.perf_counter() - started:.2f}s")
    # Cost per driver allocation with MEMORY2 on (callbacks on too: Python ones here).
    cost_driver("cupti-memory2+python-callbacks", 500)
    cupti.activity_flush_all(1)
    for kind in ("MEMORY2", "MEMORY_POOL"):
        cupti.activity_disable(getattr(cupti.ActivityKind, kind))
    cupti.unsubscribe(subscriber)
    cupti.activity_flush_all(1)
    kinds = {int(v): k for k, v in cupti.ActivityKind.__members__.items()}
    meta = {
        "memory_kinds": {str(int(v)): k for k, v in cupti.ActivityMemoryKind.__members__.items()},
        "operation_types": {
            str(int(v)): k for k, v in cupti.ActivityMemoryOperationType.__members__.items()
        },
        "activity_kinds": {str(k): kinds[k] for k in {r["kind"] for r in records}},
        "libraries": sorted(libraries),
        "expect": memory_demo.marked_lines(),
    }
    demo_calls = [c for c in calls if c["line"]]
    print(f"CALLS {len(calls)} (from the demo: {len(demo_calls)}) RECORDS {len(records)}")
    for c in demo_calls[:40]:
        print("CALL", c)
    for r in records[:40]:
        print("REC", {k: r.get(k) for k in SHOWN})
    (out / "memory_raw.json").write_text(
        json.dumps({"meta": meta, "calls": calls, "records": records}, indent=0)
    )


def cost_driver(what: str, count: int) -> None:
    """ns per cudaMalloc + cudaFree pair of 1 MiB."""
    from cuda.bindings import runtime as rt

    started = time.perf_counter_ns()
    for _ in range(count):
        _, ptr = rt.cudaMalloc(1 << 20)
        rt.cudaFree(ptr)
    print(f"COST {what} {(time.perf_counter_ns() - started) / count:.0f} ns per malloc+free")


def probe_torch() -> None:
    import torch

    words = ("trace", "tracker", "alloc", "stat", "memory", "observer")
    names = [n for n in dir(torch._C) if any(w in n.lower() for w in words)]
    print("TORCH _C", names)
    print("TORCH memory", [n for n in dir(torch.cuda.memory) if not n.startswith("__")])
    from torch.cuda import _gpu_trace

    print("TORCH _gpu_trace", [n for n in dir(_gpu_trace) if "register" in n])
    seen: list = []
    allocated = torch.cuda.memory_allocated

    def on_alloc(ptr):
        seen.append(("alloc", ptr, allocated(), sys._getframe(1).f_code.co_name))

    def on_free(ptr):
        seen.append(("free", ptr, allocated(), sys._getframe(1).f_code.co_name))

    _gpu_trace.register_callback_for_memory_allocation(on_alloc)
    _gpu_trace.register_callback_for_memory_deallocation(on_free)
    torch._C._activate_gpu_trace()
    before = allocated()
    x = torch.empty(3 * (1 << 20), dtype=torch.uint8, device="cuda")
    del x
    print("TORCH gpu_trace before", before, "seen", seen)
    n = 2000
    started = time.perf_counter_ns()
    for _ in range(n):
        y = torch.empty(4096, device="cuda")
        del y
    hooked = (time.perf_counter_ns() - started) / n
    print(
        f"COST torch-gpu-trace+memory_allocated {hooked:.0f} ns per alloc+free (seen {len(seen)})"
    )
    # The callbacks stay registered: a process-wide list. Empty it to time the rest.
    _gpu_trace.CUDATrace.memory_allocation_callbacks.fire_callbacks = lambda *a: None
    _gpu_trace.CUDATrace.memory_deallocation_callbacks.fire_callbacks = lambda *a: None
    started = time.perf_counter_ns()
    for _ in range(n):
        y = torch.empty(4096, device="cuda")
        del y
    print(f"COST torch-gpu-trace-noop {(time.perf_counter_ns() - started) / n:.0f} ns")
    started = time.perf_counter_ns()
    for _ in range(n):
        allocated()
    print(f"COST torch-memory_allocated {(time.perf_counter_ns() - started) / n:.0f} ns per call")


def probe_torch_history() -> None:
    import torch

    n = 2000
    for label, kwargs in (
        ("none", None),
        ("history-no-stacks", {"enabled": "all", "context": None, "stacks": "python"}),
        ("history-python", {"enabled": "all", "context": "all", "stacks": "python"}),
    ):
        if kwargs is not None:
            try:
                torch.cuda.memory._record_memory_history(**kwargs, max_entries=100000)
            except Exception as exc:
                print("TORCH history", label, type(exc).__name__, exc)
                continue
        started = time.perf_counter_ns()
        for _ in range(n):
            y = torch.empty(4096, device="cuda")
            del y
        print(f"COST torch-{label} {(time.perf_counter_ns() - started) / n:.0f} ns per alloc+free")
        if kwargs is not None:
            snap = torch.cuda.memory._snapshot()
            traces = snap.get("device_traces", [[]])[0]
            print("TORCH history entry", label, traces[-1] if traces else None)
            torch.cuda.memory._record_memory_history(enabled=None)


def probe_cupy() -> None:
    import cupy

    events: list = []

    class Hook(cupy.cuda.MemoryHook):
        name = "kname-probe"

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            events.append(("malloc", size, mem_size, mem_ptr))

        def alloc_postprocess(self, device_id, mem_size, mem_ptr):
            events.append(("alloc", mem_size, mem_ptr))

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            events.append(("free", mem_size, mem_ptr))

    n = 2000
    for label, hook in (("none", None), ("memoryhook", Hook())):
        cm = hook if hook is not None else _Null()
        with cm:
            started = time.perf_counter_ns()
            for _ in range(n):
                y = cupy.empty(4096, dtype=cupy.float32)
                del y
            cost = (time.perf_counter_ns() - started) / n
        print(f"COST cupy-{label} {cost:.0f} ns per alloc+free")
    print("CUPY events", len(events), events[:4])


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def probe_numba() -> None:
    from numba import cuda

    ctx = cuda.current_context()
    print("NUMBA memory manager", type(ctx.memory_manager).__name__, ctx.memory_manager.__module__)
    print("NUMBA ctx", [n for n in dir(ctx) if "mem" in n.lower() or "dealloc" in n.lower()])


def kname_session(out: Path) -> None:
    """The demo in a kname ProfileSession(memory=True): its table, its streams (the fixture the
    CI join replays), then the cost per allocation of each pool with the session on and off."""
    from kname.profiling.session import ProfileSession

    libraries = memory_demo.available()
    session = ProfileSession(keep_streams=True, memory=True)
    print("SESSION started", session.start(), session.collector.launch_callbacks)
    run_demo(libraries)
    # The streams of the demo alone (the fixture), with what the live run found per line.
    session.collector.flush()  # CUPTI's buffers so far to the join
    live = {view: ledger.site_dicts() for view, ledger in session.ledgers().items()}
    session.save_streams(out / "memory_streams.json", demo=memory_demo.marked_lines(), live=live)
    loops = {}
    if "torch" in libraries:
        import torch

        loops["torch"] = lambda: torch.empty(4096, device="cuda")
    if "cupy" in libraries:
        import cupy

        loops["cupy"] = lambda: cupy.empty(4096, dtype=cupy.float32)
    if "driver" in libraries:
        from cuda.bindings import runtime as rt

        loops["driver"] = lambda: rt.cudaFree(rt.cudaMalloc(1 << 20)[1])
    costs = {label: time_loop(loop) for label, loop in loops.items()}
    session.stop()
    write_session(session, out)
    for label, loop in loops.items():
        print(f"COST {label} on {costs[label]:.0f} off {time_loop(loop):.0f} ns per alloc+free")


def write_session(session, out: Path) -> None:
    """The session's table, files and each view's lines."""
    print(session.table())
    session.save(out / "memory_profile.json")
    session.save_html(out / "memory_profile.html")
    for view, ledger in session.ledgers().items():
        print(f"VIEW {view} peak {ledger.peak} site {ledger.peak_site()}")
        for site, row in ledger.site_dicts().items():
            print(f"SITE {view} {site} {row}")


def run_demo(libraries: set[str]) -> None:
    """The demo's allocations; a failure is printed, and what was recorded is still written."""
    try:
        memory_demo.run(libraries)
    except Exception as exc:
        print(f"DEMO failed: {type(exc).__name__}: {exc}")


def time_loop(loop, count: int = 2000) -> float:
    """ns per call of `loop` (an allocation freed at once)."""
    started = time.perf_counter_ns()
    try:
        for _ in range(count):
            loop()
    except Exception as exc:
        print(f"LOOP failed: {type(exc).__name__}: {exc}")
        return -1.0
    return (time.perf_counter_ns() - started) / count


def main() -> int:
    if sys.argv[1:2] == ["--session"]:
        kname_session(Path(sys.argv[2]))
        return 0
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    try:
        cost_driver("bare", 500)
    except Exception as exc:
        print("COST bare failed", exc)
    for step in (record, probe_cupy, probe_numba, probe_torch_history, probe_torch):
        try:
            step(out) if step is record else step()
        except Exception as exc:
            import traceback

            print(f"PROBE {step.__name__} failed: {type(exc).__name__}: {exc}")
            traceback.print_exc(limit=4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
