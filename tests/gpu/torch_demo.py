"""A PyTorch training program, as a new user writes one, for `kname profile` with no settings.

tests/gpu/test_gpu_torch.py runs it as `kname profile --json profile.json -- python torch_demo.py`
on a GPU and checks that every call site in the profile is one of the lines below marked
`# site: MARKER` (each launches GPU work, or may), or that line marked ` (compile)`:

    a two-layer nn.Module trained for ten steps (forward, cross_entropy, backward, SGD.step);
    then torch.compile(model) called ten times (its first call compiles and autotunes);
    then three training steps through the compiled model (its backward compiled at the first).

No kname setting: torch, dynamo, Inductor's generated code and autograd are library code by
default, and autograd's threads launch under the backward pass's line. TORCH_DEMO_DEVICE=cpu
runs it without a GPU (a dry run of the program itself).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

DEVICE = os.environ.get("TORCH_DEMO_DEVICE", "cuda")
STEPS = 10
COMPILED_CALLS = 10
COMPILED_STEPS = 3


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1024, 2048)
        self.fc2 = nn.Linear(2048, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))  # site: fc1
        return self.fc2(h)  # site: fc2


def main() -> None:
    torch.manual_seed(0)  # site: seed
    model = Net().to(DEVICE)  # site: to-device
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device=DEVICE)  # site: inputs
    y = torch.randint(0, 10, (256,), device=DEVICE)  # site: labels
    for _ in range(STEPS):
        opt.zero_grad()  # site: zero-grad
        loss = F.cross_entropy(model(x), y)  # site: loss
        loss.backward()  # site: backward
        opt.step()  # site: step

    compiled = torch.compile(model)
    for _ in range(COMPILED_CALLS):
        out = compiled(x)  # site: compiled
    for _ in range(COMPILED_STEPS):
        opt.zero_grad()  # site: compiled-zero-grad
        loss = F.cross_entropy(compiled(x), y)  # site: compiled-loss
        loss.backward()  # site: compiled-backward
        opt.step()  # site: compiled-step
    if DEVICE == "cuda":
        torch.cuda.synchronize()  # site: sync
    print(f"TORCH DEMO DONE {out.shape[0]} {loss.item():.3f}")  # site: item


if __name__ == "__main__":
    main()
