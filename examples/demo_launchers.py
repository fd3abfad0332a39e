"""A project's own launch helper. Listed in KNAME_SKIP, so launches are named after its callers."""

import numpy as np


def launch_1d(kernel, *args):
    """Launch `kernel` over the length of the first argument."""
    size = args[0].size
    threads = 32
    kernel[(size + threads - 1) // threads, threads](*args)


def zeros_like(x):
    return np.zeros_like(x)
