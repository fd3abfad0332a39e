"""The launch-bound verdict of a profile's line, from its launch times (docs/verdict.md).

A line is launch-bound when the CPU time of its launch calls, per call, is above the GPU time of
its work, per GPU record: the GPU finishes each piece of work before the CPU has launched the
next, so it idles on this line's launches. Pure arithmetic on a site's numbers (schema.py's
`launch_times`); integers throughout, so that a verdict never turns on a float's rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LAUNCH_TIMES = "launch_times"  # a profile site's optional field (schema.py)
LAUNCH_BOUND = "launch-bound"
# A line with fewer timed calls is not judged: its one call may have loaded the kernel's module
# (CUDA's lazy loading: 0.6 ms for torch.randn's first launch on the H100), not launched it.
MIN_CALLS = 2
# Advice for a launch-bound line: one of these, by what the line launches.
FUSE = "fuse its {kernels} kernels (torch.compile, a fused op) or capture it in a CUDA graph"
BATCH = (
    "one kernel launched {launches} times: batch them into fewer, larger launches, or capture "
    "the loop in a CUDA graph"
)


def launch_bound(calls: int, cpu_ns: int, launches: int, gpu_ns: int) -> bool:
    """Whether `calls` launch calls of `cpu_ns` CPU time in all take longer per call than the
    `launches` GPU records of `gpu_ns` GPU time take per record (cross-multiplied: exact), of
    at least MIN_CALLS calls."""
    if calls < MIN_CALLS or launches <= 0:
        return False
    return cpu_ns * launches > gpu_ns * calls


def per_launch(total_ns: int, count: int) -> float:
    """`total_ns` over `count` (0.0 for none)."""
    return total_ns / count if count > 0 else 0.0


def advice(calls: int, cpu_ns: int, launches: int, gpu_ns: int, kernels: int) -> str:
    """One line of advice for a launch-bound line ("" for one that is not): fuse several
    kernels, batch one kernel launched again and again (or capture either in a CUDA graph)."""
    if not launch_bound(calls, cpu_ns, launches, gpu_ns):
        return ""
    if kernels > 1:
        return FUSE.format(kernels=kernels)
    return BATCH.format(launches=launches)


def site_times(site: Mapping[str, Any]) -> tuple[int, int, int]:
    """A profile site's (calls, cpu_ns, idle_ns), (0, 0, 0) where its launches were not timed."""
    times = site.get(LAUNCH_TIMES)
    if not times:
        return 0, 0, 0
    return times["calls"], times["cpu_ns"], times["idle_ns"]


def site_verdict(site: Mapping[str, Any]) -> str:
    """LAUNCH_BOUND for a launch-bound profile site, else ""."""
    calls, cpu_ns, _ = site_times(site)
    return LAUNCH_BOUND if launch_bound(calls, cpu_ns, site["launches"], site["gpu_ns"]) else ""


def site_advice(site: Mapping[str, Any]) -> str:
    """advice() for a profile site."""
    calls, cpu_ns, _ = site_times(site)
    return advice(calls, cpu_ns, site["launches"], site["gpu_ns"], len(site.get("kernels", ())))


def verdict_change(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    """How a site's verdict changed between two profiles: "now launch-bound", "no longer
    launch-bound", or "" (the same, or either side's launches not timed)."""
    if not before or not after or LAUNCH_TIMES not in before or LAUNCH_TIMES not in after:
        return ""
    was, now = site_verdict(before), site_verdict(after)
    if was == now:
        return ""
    return f"now {LAUNCH_BOUND}" if now else f"no longer {LAUNCH_BOUND}"
