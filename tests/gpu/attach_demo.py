"""A torch loop for `kname attach` and the trigger file (tests/gpu/test_gpu_attach.py).

    python attach_demo.py SECONDS OUT.json [READY]

Each iteration launches 8 multiplies and one add at marked lines, replays a CUDA graph of 4
multiplies captured before any window (unless ATTACH_DEMO_GRAPH=0), then synchronizes. The loop
counts, by itself, the iterations run while each kname profile window was open, from the phase
kname's session shows (session.collecting_phase, read before and after each iteration):
`inside`, CERTAIN at both ends with no change between (each of its launches is in the profile),
`touched`, anything but IDLE at either end or a change between (its launches may be). It times
each iteration: the stretches outside the windows (`segments_us`: the median before the first
window, after each window) and inside them (`during_us`). It also says whether kname detached
CUPTI (`finalize`).
Without kname (no KNAME=1) nothing of kname is imported: the same loop is the baseline.
With ATTACH_DEMO_ATTACHED=1, kname leaves CUPTI attached after each window (to measure that);
with ATTACH_DEMO_GRAPH=0, no graph is captured or replayed (kname then detaches CUPTI).
"""

import json
import os
import statistics
import sys
import time

import torch

IDLE, CERTAIN = 0, 2  # kname.profiling.session's phases (POSSIBLE, 1, between)


def phase() -> tuple[int, int]:
    """kname's collecting phase and its count of changes; (IDLE, 0) before kname loads it."""
    # Not imported here: where kname never opened a window, nothing of it is loaded. The window's
    # thread may be importing it now: a module half made has no collecting_phase yet.
    sessions = sys.modules.get("kname.profiling.session")
    read = getattr(sessions, "collecting_phase", None)
    return read() if read is not None else (IDLE, 0)


def finalize_state() -> list | None:
    """kname's native CUPTI module's finalize state (waiting, finalized, status), if loaded."""
    native = sys.modules.get("kname._native_cupti")
    state = getattr(native, "finalize_state", None)
    return list(state()) if state is not None else None


def median_us(times: list[float]) -> float | None:
    return statistics.median(times) * 1e6 if times else None


def captured(z: torch.Tensor) -> None:
    for _ in range(4):
        z.mul_(0.5)  # site: captured


def step(y: torch.Tensor, graph: torch.cuda.CUDAGraph | None) -> torch.Tensor:
    for _ in range(8):
        y.mul_(0.5)  # site: mul
    y.add_(1.0)  # site: add
    if graph is not None:
        graph.replay()  # site: replay
    return y


def capture(z: torch.Tensor) -> torch.cuda.CUDAGraph:
    """A graph of captured(z), made before any window: kname cannot see its nodes made."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            captured(z)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured(z)
    return graph


def main() -> None:
    seconds, out = float(sys.argv[1]), sys.argv[2]
    y, z = torch.ones(4096, device="cuda"), torch.ones(4096, device="cuda")
    graph = capture(z) if os.environ.get("ATTACH_DEMO_GRAPH") != "0" else None
    for _ in range(200):  # warm-up: torch's first launches, the allocator
        step(y, graph)
    torch.cuda.synchronize()
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as ready:  # the timed loop starts now: attach may come
            ready.write(str(os.getpid()))
    if os.environ.get("ATTACH_DEMO_ATTACHED") == "1":
        import kname.profiling.ondemand as ondemand  # under KNAME=1 it is loaded already

        ondemand.DETACH = False
    segments: list[list[float]] = [[]]  # outside the windows: before the first, after each
    during: list[list[float]] = []
    windows: list[dict[str, int]] = []
    in_window = False
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        at_start = phase()
        start = time.perf_counter()
        step(y, graph)
        torch.cuda.synchronize()
        took = time.perf_counter() - start
        at_end = phase()
        inside = at_start[0] == CERTAIN and at_end == at_start
        touched = at_start[0] != IDLE or at_end[0] != IDLE or at_end[1] != at_start[1]
        if touched:
            if not in_window:
                windows.append({"inside": 0, "touched": 0})
                during.append([])
                in_window = True
            windows[-1]["touched"] += 1
            windows[-1]["inside"] += inside
            during[-1].append(took)
        else:
            if in_window:
                segments.append([])
                in_window = False
            segments[-1].append(took)
    before = segments[0]
    summary = {
        "windows": windows,  # iterations certainly in each window's profile, possibly in it
        "segments_us": [median_us(times) for times in segments],
        "segment_iterations": [len(times) for times in segments],
        "during_us": [median_us(times) for times in during],
        "median_before_us": median_us(before),
        "median_after_us": median_us(segments[1]) if len(segments) > 1 else None,
        # A/A: the first and second halves of the iterations before the window.
        "median_first_half_us": median_us(before[: len(before) // 2]),
        "median_second_half_us": median_us(before[len(before) // 2 :]),
        "finalize": finalize_state(),
    }
    with open(out, "w") as file:
        json.dump(summary, file)
    print("attach demo done", json.dumps(summary))


if __name__ == "__main__":
    main()
