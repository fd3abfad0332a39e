"""A torch training step, timed: what `kname profile --memory` adds to an allocation-heavy loop.

    python3 tests/gpu/memory_cost.py [STEPS]      prints `STEP <ms per step>` and
                                                  `ALLOC <ns per torch.empty and its free>`
Run bare, under `kname profile` and under `kname profile --memory`, and compare.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    import torch

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    data = torch.randn(256, 1024, device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = model(data).square().mean()
        loss.backward()
        optimizer.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    print(f"STEP {1000 * (time.perf_counter() - started) / steps:.3f} ms")
    started = time.perf_counter_ns()
    for _ in range(2000):
        block = torch.empty(4096, device="cuda")
        del block
    print(f"ALLOC {(time.perf_counter_ns() - started) / 2000:.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
