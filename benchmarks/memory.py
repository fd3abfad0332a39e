"""Worker: memory after many distinct call sites (generated code), with an NVTX tool attached.

Generates `functions` modules-worth of code, each function holding `lines` launch statements
(every statement is its own call site: same code object, another f_lasti), calls each function
once, and reports how big kname's caches grew: len(callsite.sites) against site_cache.MAX_SITES,
tracemalloc's current and peak over the launches, and the NVTX names kname registered.
The generated code is compiled and held before tracing starts, so it is not counted.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import use_checkout, write_json, write_module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sites", type=int, default=120_000)
    parser.add_argument("--lines", type=int, default=100, help="call sites per function")
    parser.add_argument("--top", type=int, default=12, help="allocating lines to report")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    use_checkout()

    import bench_noop_target as target

    import kname
    from kname import callsite, ranges, site_cache

    kname.install(targets=["bench_noop_target:launch"])
    functions = -(-args.sites // args.lines)
    body = "    target.launch(arg)\n" * args.lines
    source = "".join(f"def site_{i:05d}():\n{body}\n" for i in range(functions))
    workdir = Path(tempfile.mkdtemp(prefix="kname-bench-"))
    started = time.perf_counter()
    module = write_module(workdir, "bench_memory_sites", source)
    module.target, module.arg = target, 1
    calls = [getattr(module, f"site_{i:05d}") for i in range(functions)]
    compile_s = time.perf_counter() - started

    # One launch from a site outside the measured set first: it pays the one-time costs
    # (importing nvtx and numpy, creating the domain) that are no part of a site's memory.
    warm = write_module(workdir, "bench_memory_warm", "def warm():\n    target.launch(arg)\n")
    warm.target, warm.arg = target, 1
    warm.warm()

    gc.collect()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    started = time.perf_counter()
    for call in calls:
        call()
    traced_s = time.perf_counter() - started
    current, peak = tracemalloc.get_traced_memory()
    top = tracemalloc.take_snapshot().statistics("lineno")[: args.top]
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    generated = functions * args.lines
    write_json(
        args.json,
        {
            "call_sites_generated": generated,
            "sites_cached": len(callsite.sites),
            "max_sites": site_cache.MAX_SITES,
            "within_bound": len(callsite.sites) <= site_cache.MAX_SITES,
            "nvtx_registered_names": ranges.registered_names(),
            "nvtx_max_names": ranges.MAX_NAMES,
            "tool_attached": ranges.tool_attached(),
            "tracemalloc_current_bytes": current,
            "tracemalloc_peak_bytes": peak,
            "bytes_per_site": round(current / max(1, len(callsite.sites)), 1),
            "max_rss_growth_kib": rss_after - rss_before,
            "compile_seconds": round(compile_s, 2),
            "launch_seconds_traced": round(traced_s, 2),
            "top": [
                {"where": _where(stat.traceback[0]), "bytes": stat.size, "blocks": stat.count}
                for stat in top
            ],
        },
    )


def _where(frame) -> str:
    parts = Path(frame.filename).parts
    return f"{'/'.join(parts[-2:])}:{frame.lineno}"


if __name__ == "__main__":
    main()
