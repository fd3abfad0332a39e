"""A data-parallel step under torchrun, for kname profile across ranks
(tests/gpu/test_gpu_ranks.py).

    torchrun --standalone --nproc-per-node 2 ranks_demo.py --backend nccl [--slow-rank 1]

Each rank multiplies matrices (the compute line), all-reduces the product (blocking, then
asynchronously, waiting for it after a matmul of its own) and synchronises. With --slow-rank,
that rank's compute line does three times the work: it is the straggler. The lines the test
reads carry `# site: NAME` markers. The NCCL kernels run on NCCL's own stream; their launch API
call is made on the calling thread, inside the collective, so kname names them after the line
that called it.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    a = torch.randn(2048, 2048, device=device)
    repeats = 3 if rank == args.slow_rank else 1
    for _ in range(args.steps):
        for _ in range(repeats):
            b = a @ a  # site: compute
        dist.all_reduce(b)  # site: all_reduce
        work = dist.all_reduce(b, async_op=True)  # site: all_reduce_async
        c = a @ a  # site: overlap
        work.wait()
        a = (b + c) / b.norm()  # site: update
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    print(f"RANKS DEMO DONE rank {rank} device {device.index}", flush=True)


if __name__ == "__main__":
    main()
