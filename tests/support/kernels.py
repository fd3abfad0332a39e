"""The numba kernels the tests share, as source text for the programs they write and run.

A test program (a subprocess's app.py, a notebook cell, a pytester suite) launches real numba
kernels on the CUDA simulator (NUMBA_ENABLE_CUDASIM=1). `program(body)` is such a program: the
imports, the kernels, then `body`; a program's own imports go before it.
"""

from __future__ import annotations

IMPORTS = """\
import numpy as np
from numba import cuda
"""

# out = a * x + out: each launch adds to `out`, so its value says how many launches ran.
AXPY = """\
@cuda.jit
def axpy(out, a, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + out[i]
"""

# out = out + 1
INC = """\
@cuda.jit
def inc(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += 1
"""


def program(body: str, *kernels: str) -> str:
    """A program: numpy and numba's cuda imported, `kernels` (AXPY by default), then `body`."""
    parts = [IMPORTS, *(kernels or [AXPY]), body]
    return "\n\n".join(part.rstrip("\n") + "\n" for part in parts)
