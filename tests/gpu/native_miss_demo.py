"""GPU program: real kernels launched from new lines, named by the C wrapper's miss path (issue 43)
and then again by Python alone; prints one JSON object.

    python tests/gpu/native_miss_demo.py OUT_DIR

For each library installed (numba-cuda, CuPy), a module written to OUT_DIR launches one kernel
from each of 12 lines. Its launches run twice, the sites forgotten between: once as kname runs
(the C path names the common miss itself), once with C's naming off (NativeMiss.in_c), so
Python's rules name every line. Prints {lib: {"c": names, "python": names, "in_c": files C
named}}, or {lib: "skipped: why"} or {lib: "failed: error"}.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 calls it; numpy 2.5 removed it
    np.row_stack = np.vstack

import kname
from kname import callsite, hotpath

LINES = 12
SOURCES = {
    "numba": (
        "from numba import cuda\n\n@cuda.jit\ndef bump(x):\n    i = cuda.grid(1)\n"
        "    if i < x.size:\n        x[i] += 1\n",
        "def line{n}(x):\n    bump[4, 32](x)\n",
        lambda: __import__("numba").cuda.to_device(np.zeros(128, dtype=np.float32)),
    ),
    "cupy": (
        "import cupy as cp\n\nbump = cp.ElementwiseKernel('T x', 'T y', 'y = x + 1', 'bump')\n",
        "def line{n}(x):\n    return bump(x)\n",
        lambda: __import__("cupy").zeros(128, dtype="float32"),
    ),
}


def names_of(module, x, in_c: bool) -> list[str]:
    callsite.clear()
    callsite.NativeMiss.in_c = in_c
    for n in range(LINES):
        getattr(module, f"line{n}")(x)
    return sorted(site.name for site in callsite.sites.values())


def main(folder: Path) -> None:
    if not kname.is_installed():
        kname.install()
    result: dict = {"hot_path": hotpath.current().why_python or "C"}
    sys.path.insert(0, str(folder))
    for lib, (head, line, data) in SOURCES.items():
        try:
            source = head + "\n".join("\n" + line.format(n=n) for n in range(LINES))
            (folder / f"miss_{lib}.py").write_text(source)
            module = importlib.import_module(f"miss_{lib}")
            x = data()
            module.line0(x)  # compiled and the file seen: each line below is a new one
            c = names_of(module, x, in_c=True)
            in_c = sorted(file for _, file in callsite.NativeMiss.places)
            result[lib] = {"c": c, "python": names_of(module, x, in_c=False), "in_c": in_c}
        except ImportError as exc:
            result[lib] = f"skipped: {exc}"
        except Exception as exc:  # told in the output, which the test reads
            result[lib] = f"failed: {type(exc).__name__}: {exc}"
    print(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
