"""CuPy ufuncs and a reduction, for the driver hook's GPU test
(tests/gpu/test_gpu_driver_hook.py)."""

import cupy as cp


def main() -> None:
    a = cp.arange(1 << 16, dtype=cp.float32)  # site: arange
    for _ in range(3):
        b = cp.sin(a) * 2.0 + a  # site: ufuncs
        total = b.sum()  # site: reduction
    float(total)


if __name__ == "__main__":
    main()
