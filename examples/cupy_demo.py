"""kname profile's example: three lines of CuPy, each given its GPU time (needs a GPU).

    kname profile --json profile.json -- python examples/cupy_demo.py [--size N] [--steps N]

The profiles in examples/ were recorded from it on an H100/H200 (examples/record.sh says how),
so that `kname report` can be tried on them without a GPU.
"""

import argparse

import cupy as cp


def step(x):
    y = x @ x  # a matrix product (cuBLAS)
    y = cp.tanh(y) + x  # two elementwise kernels
    return float(y.sum())  # a reduction, and a copy to the host


def main() -> None:
    parser = argparse.ArgumentParser(description="three lines of CuPy kernels")
    parser.add_argument("--size", type=int, default=2048, help="matrix side (default 2048)")
    parser.add_argument("--steps", type=int, default=20, help="times step() runs (default 20)")
    args = parser.parse_args()
    x = cp.random.rand(args.size, args.size, dtype=cp.float32) / args.size
    for _ in range(args.steps):
        total = step(x)
    print(f"cupy demo: {args.steps} steps of {args.size}x{args.size}, sum {total:.1f}")


if __name__ == "__main__":
    main()
