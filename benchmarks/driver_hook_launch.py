"""Host time of one torch launch (x.add_(1) on a 1-element CUDA tensor): best of 200 rounds of 100
launches, the GPU idle at each round's start (so that no launch waits for room in the queue).

Run under each setting the README's table compares (no kname; KNAME=1 with no NVTX tool; KNAME=1
with the null tool, hook off and on): `python benchmarks/driver_hook_launch.py LABEL`.
"""

import sys
import time

import torch

ROUNDS, LAUNCHES = 200, 100


def per_launch_us() -> float:
    x = torch.zeros(1, device="cuda")
    for _ in range(LAUNCHES):
        x.add_(1)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(LAUNCHES):
            x.add_(1)
        best = min(best, time.perf_counter() - start)
    return best / LAUNCHES * 1e6


if __name__ == "__main__":
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'run'}: {per_launch_us():.3f} us per launch")
