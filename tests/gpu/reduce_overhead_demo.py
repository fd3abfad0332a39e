"""torch.compile(mode="reduce-overhead"), as a user writes it, for `kname profile` with no settings.

tests/gpu/test_gpu_compile_modes.py runs it as `kname profile --json profile.json -- python
reduce_overhead_demo.py` on a GPU: a small MLP's inference, compiled with cudagraph trees and
called CALLS times from one line. Its first calls compile, warm up and record a CUDA graph
(compile-time work: `(compile)` after the line); the steady-state calls replay that graph
(the line's run, never `(compile)`).

With REDUCE_DEMO_STREAMS=<path>, under `kname profile --trace ...` (which keeps the streams), it
writes the recorded streams there at its end (the replay fixture
tests/data/reduce_overhead_h100.json) and prints per site its launches and graph nodes; with
REDUCE_DEMO_STACKS=1 it prints the Python frames above each distinct CUDA graph capture and
replay (what torch's own code runs at each stage).
"""

from __future__ import annotations

import os

import torch

CALLS = 12

model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)
).cuda()  # site: model


@torch.compile(mode="reduce-overhead")
def infer(x: torch.Tensor) -> torch.Tensor:
    return model(x).softmax(dim=-1)


def main() -> None:
    x = torch.randn(64, 256, device="cuda")  # site: x
    with torch.no_grad():
        for _ in range(CALLS):
            torch.compiler.cudagraph_mark_step_begin()
            y = infer(x)  # site: infer
    total = y.sum().item()  # site: total
    print("REDUCE OVERHEAD DEMO DONE", round(total, 3))


def show_stacks() -> None:
    """Print the frames (module, function) above each distinct graph capture and replay."""
    import sys

    seen: set[tuple] = set()

    def frames() -> tuple:
        frame, out = sys._getframe(2), []
        while frame is not None:
            out.append(f"{frame.f_globals.get('__name__')}:{frame.f_code.co_qualname}")
            frame = frame.f_back
        return tuple(out)

    def watched(name: str, method):
        def run(*args, **kwargs):
            stack = (name, *frames())
            if stack not in seen:
                seen.add(stack)
                print("STACK", " <- ".join(stack))
            return method(*args, **kwargs)

        return run

    graph = torch.cuda.CUDAGraph
    for name in ("replay", "capture_begin", "capture_end"):
        setattr(graph, name, watched(name, getattr(graph, name)))


def record_streams(path: str) -> None:
    """The profile's streams to `path` (after stopping it), and per site its launches (graph
    launches apart) and the graph nodes made there."""
    from kname.profiling import mode

    session = mode._session
    session.stop()  # what the GPU finished so far is flushed into the streams
    session.save_streams(path, demo="reduce_overhead_demo.py")
    counts: dict[str, list[int]] = {}
    for launch in session.streams().launches:
        if not launch.parent:
            counts.setdefault(launch.site, [0, 0])[launch.graph] += 1
    for site, (plain, graphs) in sorted(counts.items()):
        print(f"LAUNCHES {site!r} plain={plain} graph={graphs}")
    nodes: dict[str, int] = {}
    for node in session.streams().graph_nodes:
        if node.event == "created":
            nodes[node.site] = nodes.get(node.site, 0) + 1
    for site, made in sorted(nodes.items()):
        print(f"GRAPH NODES {site!r} made={made}")


if __name__ == "__main__":
    if os.environ.get("REDUCE_DEMO_STACKS"):
        show_stacks()
    main()
    if os.environ.get("REDUCE_DEMO_STREAMS"):
        record_streams(os.environ["REDUCE_DEMO_STREAMS"])
