"""A data-parallel step under torchrun, for kname profile across ranks
(tests/gpu/test_gpu_ranks.py).

    torchrun --standalone --nproc-per-node 2 ranks_demo.py --backend nccl [--slow-rank 1]

Each rank multiplies matrices (the compute line), all-reduces the product (blocking, then
asynchronously, waiting for it after a matmul of its own) and synchronises. With --slow-rank,
that rank's compute line does three times the work: it is the straggler, and under NCCL the
other rank's all_reduce kernel waits for it on the GPU. The NCCL kernels run on NCCL's own
stream; their launch API call is made on the calling thread, inside the collective, so kname
names them after the line that called it. Then each rank captures a CUDA graph of two lines
(warmed up first on a side stream, as PyTorch asks) and replays it --replays times.

--pause sleeps after each step (a run long enough for a trigger-file window); --ready DIR: each
rank writes DIR/ready.rank<N> after its first step. The lines the test reads carry
`# site: NAME` markers.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=2048, help="the matrices' side")
    parser.add_argument("--replays", type=int, default=20, help="of the CUDA graph")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds after each step")
    parser.add_argument("--ready", help="a folder: ready.rank<N> written after the first step")
    args = parser.parse_args()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    a = torch.randn(args.size, args.size, device=device)
    repeats = 3 if rank == args.slow_rank else 1
    for step in range(args.steps):
        for _ in range(repeats):
            b = a @ a  # site: compute
        dist.all_reduce(b)  # site: all_reduce
        work = dist.all_reduce(b, async_op=True)  # site: all_reduce_async
        c = a @ a  # site: overlap
        work.wait()
        a = (b + c) / b.norm()  # site: update
        if step == 0 and args.ready:
            torch.cuda.synchronize()
            Path(args.ready, f"ready.rank{rank}").write_text("ready\n")
        if args.pause:
            time.sleep(args.pause)
    torch.cuda.synchronize()
    replay_graph(a, args.replays)
    dist.barrier()
    dist.destroy_process_group()
    print(f"RANKS DEMO DONE rank {rank} device {device.index}", flush=True)


def replay_graph(x: torch.Tensor, replays: int) -> None:
    """A CUDA graph of two lines, captured on this rank and replayed `replays` times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warmed up off the capture, as PyTorch's docs ask
        for _ in range(3):
            graph_body(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_body(x)
    for _ in range(replays):
        graph.replay()  # site: replay
    torch.cuda.synchronize()


def graph_body(x: torch.Tensor) -> torch.Tensor:
    y = x @ x  # site: graph_matmul
    return torch.relu(y)  # site: graph_relu


if __name__ == "__main__":
    main()
