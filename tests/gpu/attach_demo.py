"""A torch loop for `kname attach` and the trigger file (tests/gpu/test_gpu_attach.py).

    python attach_demo.py SECONDS OUT.json [READY]

Each iteration launches 8 multiplies and one add at marked lines, replays a CUDA graph of 4
multiplies captured before any window, then synchronizes. The loop
counts, by itself, the iterations run while each kname profile window was open (kname's session
collecting, read before and after each iteration: `inside` had it open at both ends, `touched`
at either), and times each iteration outside the windows, before the first and after it.
Without kname (no KNAME=1) nothing of kname is imported: the same loop is the baseline.
"""

import json
import os
import statistics
import sys
import time

import torch


def window_open() -> bool:
    # Not imported here: where kname never opened a window, nothing of it is loaded. The window's
    # thread may be importing it now: a module half made has no _collecting yet.
    sessions = sys.modules.get("kname.profiling.session")
    return getattr(sessions, "_collecting", None) is not None


def captured(z: torch.Tensor) -> None:
    for _ in range(4):
        z.mul_(0.5)  # site: captured


def step(y: torch.Tensor, graph: torch.cuda.CUDAGraph) -> torch.Tensor:
    for _ in range(8):
        y.mul_(0.5)  # site: mul
    y.add_(1.0)  # site: add
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
    graph = capture(z)
    for _ in range(200):  # warm-up: torch's first launches, the allocator
        step(y, graph)
    torch.cuda.synchronize()
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as ready:  # the timed loop starts now: attach may come
            ready.write(str(os.getpid()))
    before, after, windows = [], [], []
    in_window = False
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        open_before = window_open()
        start = time.perf_counter()
        step(y, graph)
        torch.cuda.synchronize()
        took = time.perf_counter() - start
        open_after = window_open()
        if open_before or open_after:
            if not in_window:
                windows.append({"inside": 0, "touched": 0})
                in_window = True
            windows[-1]["touched"] += 1
            windows[-1]["inside"] += open_before and open_after
        else:
            in_window = False
            (after if windows else before).append(took)
    summary = {
        "windows": windows,  # iterations with the window open at both ends, at either
        "before": len(before),
        "after": len(after),
        "median_before_us": statistics.median(before) * 1e6 if before else None,
        "median_after_us": statistics.median(after) * 1e6 if after else None,
        # A/A: the first and second halves of the iterations before the window.
        "median_first_half_us": statistics.median(before[: len(before) // 2]) * 1e6
        if len(before) > 1
        else None,
        "median_second_half_us": statistics.median(before[len(before) // 2 :]) * 1e6
        if len(before) > 1
        else None,
    }
    with open(out, "w") as file:
        json.dump(summary, file)
    print("attach demo done", json.dumps(summary))


if __name__ == "__main__":
    main()
