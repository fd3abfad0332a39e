"""A PyTorch training step, four times, for the driver hook's GPU test."""

import torch


def main() -> None:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)]
    model = torch.nn.Sequential(*layers)
    model = model.cuda()  # site: to_gpu
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256, device="cuda")  # site: data
    y = torch.randint(0, 10, (64,), device="cuda")  # site: labels
    for _ in range(4):
        opt.zero_grad()  # site: zero_grad
        out = model(x)  # site: forward
        loss = torch.nn.functional.cross_entropy(out, y)  # site: loss
        loss.backward()  # site: backward
        opt.step()  # site: step
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
