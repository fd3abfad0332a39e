"""A small transformer's training steps, for `kname profile`: backward time per forward line.

tests/gpu/test_gpu_backward.py runs it as `kname profile --json profile.json -- python
backward_demo.py` on a GPU and checks that the lines marked `# site: attention` and
`# site: mlp` each show backward time (the backward kernels of their ops), and that the forward
lines' backward times add up to the `loss.backward()` line's, within 2%.

Two pre-norm blocks (causal self-attention through scaled_dot_product_attention, a GELU MLP),
bf16 autocast, AdamW; BACKWARD_DEMO_STEPS steps (default 6). BACKWARD_DEMO_DEVICE=cpu runs it
without a GPU (a dry run of the program itself).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

DEVICE = os.environ.get("BACKWARD_DEMO_DEVICE", "cuda")
STEPS = int(os.environ.get("BACKWARD_DEMO_STEPS", "6"))
VOCAB, DIM, HEADS, CONTEXT, BATCH = 512, 256, 4, 128, 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)  # site: qkv
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # site: attention
        return self.proj(y.transpose(1, 2).reshape(b, t, c))  # site: proj

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))  # site: mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))  # site: attention-residual
        return x + self.mlp(self.ln2(x))  # site: mlp-residual


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # site: embed
        for block in self.blocks:
            x = block(x)  # site: block
        return self.head(self.norm(x))  # site: head


def make(device: str = DEVICE) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """The model, its optimizer and a batch of tokens (inputs and targets side by side)."""
    torch.manual_seed(0)  # site: seed
    model = Model().to(device)  # site: to-device
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1), device=device)  # site: tokens
    return model, opt, tokens


def step(model: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
    """One training step: forward under bf16 autocast, backward, AdamW."""
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])  # site: forward
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())  # site: loss
    loss.backward()  # site: backward
    opt.step()  # site: opt-step
    opt.zero_grad(set_to_none=True)
    return loss


def main() -> None:
    model, opt, tokens = make()
    for _ in range(STEPS):
        loss = step(model, opt, tokens)
    print("loss", float(loss))  # site: print-loss
    print("BACKWARD DEMO DONE")


if __name__ == "__main__":
    main()
